"""kvp2p.testing.starve: a CPU quota throttles what it holds and leaves no
cgroup behind; busy loops take every core and leave no process behind.

The quota needs a writable cgroup cpu controller (root); without one the
quota cases skip. Bounds are derived from what is measured: a spinning
process under a quota of q millicores may use at most q/1000 of a CPU
per period over the time it was held, plus one period of slack."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from kvp2p.testing import starve

SPIN = [sys.executable, "-S", "-c", "while True: pass"]


def test_millicores() -> None:
    assert starve.millicores("100m") == 100
    assert starve.millicores("0.25") == 250
    assert starve.millicores("2") == 2000
    with pytest.raises(ValueError):
        starve.millicores("0m")


@pytest.mark.skipif(bool(starve.available()), reason=starve.available() or "")
def test_quota_throttles_and_cleans_up() -> None:
    p = subprocess.Popen(SPIN)
    try:
        with starve.CpuQuota(100, "test") as q:
            q.add([p.pid])
            t0 = time.monotonic()
            time.sleep(0.5)
            st = q.stat()
            held = time.monotonic() - t0
            path = q.path
            assert os.path.isdir(path)
        assert st.throttled > 0, st
        assert st.usage_s is not None
        assert st.usage_s <= 0.1 * held + starve.PERIOD_US / 1e6, st
        assert not os.path.exists(path)
        with open(f"/proc/{p.pid}/cgroup") as f:  # back where it came from
            assert "kvp2p-starve-" not in f.read()
    finally:
        p.kill()
        p.wait()


@pytest.mark.skipif(bool(starve.available()), reason=starve.available() or "")
def test_sweep_removes_a_dead_runs_cgroup() -> None:
    root = starve.cgroup_root()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path = os.path.join(root, f"{starve.PREFIX}{dead.pid}-x")
    os.mkdir(path)
    assert path in starve.sweep()
    assert not os.path.exists(path)


def test_busy_cores_spin_and_go() -> None:
    with starve.BusyCores(nice=10) as b:
        assert len(b.procs) == starve.cores()
        pids = [p.pid for p in b.procs]
        for pid in pids:
            assert os.getpriority(os.PRIO_PROCESS, pid) == 10
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}")  # killed and reaped
