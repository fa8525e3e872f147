"""Fixtures: real `kvp2p serve` sidecars on loopback (see kvp2p.testing)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kvp2p.testing import Sidecar, kvp2p_binary  # noqa: E402


@pytest.fixture
def sidecars() -> Iterator[Callable[..., Sidecar]]:
    """Starts sidecars; stops them (and removes their files) at the end."""
    if not os.access(kvp2p_binary(), os.X_OK):
        pytest.fail(f"no kvp2p binary at {kvp2p_binary()}: go build -o kvp2p ./cmd/kvp2p, or set KVP2P_BIN")
    made: list[Sidecar] = []

    def make(name: str, num_chunks: int = 64, row_stride: int = 4096, **kw: object) -> Sidecar:
        sc = Sidecar(name, num_chunks, row_stride, **kw)  # type: ignore[arg-type]
        made.append(sc)
        return sc.start()

    yield make
    for sc in made:
        sc.stop()
        for f in (sc.region_path, sc.socket):
            if os.path.exists(f):
                os.unlink(f)
