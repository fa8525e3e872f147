"""Processes by pid, as the harnesses that start, freeze and sweep them
need them: whether one is alive (kvp2p.testing.netns and starve sweep what
a killed run left behind by its owner's pid)."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """Whether a process pid exists (one this user may not signal counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
