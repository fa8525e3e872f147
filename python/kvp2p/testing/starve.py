"""CPU starvation for the head to head (kvp2p.testing.fleet): slow, not dead.

- CpuQuota: processes under a CFS bandwidth quota, as a Kubernetes CPU
  limit puts a container: `cpu.max` in a cgroup v2 child when the unified
  hierarchy has the cpu controller, else `cpu.cfs_quota_us` /
  `cpu.cfs_period_us` in a cgroup v1 `cpu` child (the same kernel
  mechanism, and what the kubelet writes on a v1 node). Millicores m give
  m/1000 of a CPU per 100 ms period: 100m is 10 ms of CPU every 100 ms,
  used at up to all cores' speed and then throttled to the period's end.
- BusyCores: a busy loop per core at normal priority (nice 0, or another
  nice), every core of the machine busy.

Both undo themselves on every way out: as context managers; at the
interpreter's exit (atexit) for a caller that never left the block; the
busy loops also die with their parent (PR_SET_PDEATHSIG) if it is killed;
and sweep() removes the cgroups a killed run left behind (their names
carry the creating process's pid).
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kvp2p.testing.procs import alive

PERIOD_US = 100_000  # the kernel's and the kubelet's default CFS period
V2_ROOT = "/sys/fs/cgroup"
V1_ROOT = "/sys/fs/cgroup/cpu"
PREFIX = "kvp2p-starve-"


def millicores(spec: str) -> int:
    """'100m' -> 100; '0.25' -> 250 (Kubernetes' two spellings of a CPU quantity)."""
    s = spec.strip()
    m = int(s[:-1]) if s.endswith("m") else round(float(s) * 1000)
    if m <= 0:
        raise ValueError(f"CPU quota {spec!r}: must be positive")
    return m


def _v2_cpu_root() -> str | None:
    """The cgroup v2 directory whose children may get cpu.max, or None."""
    try:
        with open(os.path.join(V2_ROOT, "cgroup.controllers")) as f:
            if "cpu" in f.read().split():
                return V2_ROOT
    except OSError:
        pass
    return None


def cgroup_root() -> str:
    """Where CpuQuota makes its cgroups: the v2 root if it has the cpu
    controller, else v1's cpu hierarchy."""
    return _v2_cpu_root() or V1_ROOT


def available() -> str:
    """Why a CPU quota cannot be set here, or ''."""
    if _v2_cpu_root() is None and not os.path.exists(os.path.join(V1_ROOT, "cpu.cfs_quota_us")):
        return "no cgroup cpu controller (neither v2 cpu.max nor v1 cpu.cfs_quota_us)"
    if not os.access(cgroup_root(), os.W_OK):
        return f"cannot create a cgroup under {cgroup_root()} (needs root)"
    return ""


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def sweep() -> list[str]:
    """Removes the cgroups of runs whose process is gone (moving any
    process still in one back to the root); returns their paths."""
    removed = []
    for root in filter(None, (_v2_cpu_root(), V1_ROOT)):
        try:
            names = os.listdir(root)
        except OSError:
            continue
        for n in names:
            if not n.startswith(PREFIX):
                continue
            try:
                owner = int(n[len(PREFIX):].split("-")[0])
            except ValueError:
                continue
            if alive(owner):
                continue
            path = os.path.join(root, n)
            _empty(path, root)
            try:
                os.rmdir(path)
                removed.append(path)
            except OSError:
                pass
    return removed


def _empty(path: str, root: str) -> None:
    """Moves every process of cgroup path back to root."""
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            pids = [int(x) for x in f.read().split()]
    except OSError:
        return
    for p in pids:
        try:
            _write(os.path.join(root, "cgroup.procs"), str(p))
        except OSError:
            pass  # exited meanwhile


def _cpu_seconds(pid: int) -> float:
    """A process's user and system CPU time so far (its live threads' and
    its exited ones'); 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


@dataclass
class Throttled:
    """What the quota did (the cgroup's cpu.stat): periods with runnable
    work, periods throttled, time throttled, and the CPU its processes
    used."""

    periods: int = 0
    throttled: int = 0
    throttled_s: float = 0.0
    usage_s: float | None = None

    def __str__(self) -> str:
        used = "" if self.usage_s is None else f", used {self.usage_s:.3f} CPU-s"
        return f"throttled {self.throttled}/{self.periods} periods, {self.throttled_s:.3f} s{used}"


@dataclass
class CpuQuota:
    """A cgroup with a CPU quota of `millicores`; add() moves processes in
    (every thread; their later children are born inside), close() moves
    them back to the root and removes the cgroup."""

    millicores: int
    name: str = ""
    path: str = field(init=False, default="")
    root: str = field(init=False, default="")
    v2: bool = field(init=False, default=False)
    pids: list[int] = field(init=False, default_factory=list)
    cpu0: dict[int, float] = field(init=False, default_factory=dict)  # pid -> its CPU seconds when added

    def __post_init__(self) -> None:
        self.v2 = _v2_cpu_root() is not None
        self.root = cgroup_root()
        self.path = os.path.join(self.root, f"{PREFIX}{os.getpid()}-{self.name or 'q'}-{id(self):x}")
        os.mkdir(self.path)
        atexit.register(self.close)
        quota = self.millicores * PERIOD_US // 1000
        try:
            if self.v2:
                _write(os.path.join(self.path, "cpu.max"), f"{quota} {PERIOD_US}")
            else:
                _write(os.path.join(self.path, "cpu.cfs_period_us"), str(PERIOD_US))
                _write(os.path.join(self.path, "cpu.cfs_quota_us"), str(quota))
        except BaseException:
            self.close()
            raise

    def add(self, pids: Iterable[int]) -> "CpuQuota":
        for p in pids:
            try:
                _write(os.path.join(self.path, "cgroup.procs"), str(p))
                self.pids.append(p)
                self.cpu0[p] = _cpu_seconds(p)
            except ProcessLookupError:
                pass  # exited meanwhile
        return self

    def stat(self) -> Throttled:
        t = Throttled()
        try:
            with open(os.path.join(self.path, "cpu.stat")) as f:
                kv = dict(line.split() for line in f if line.strip())
        except OSError:
            return t
        t.periods, t.throttled = int(kv.get("nr_periods", 0)), int(kv.get("nr_throttled", 0))
        if "throttled_usec" in kv:
            t.throttled_s = int(kv["throttled_usec"]) / 1e6
        elif "throttled_time" in kv:  # v1: nanoseconds
            t.throttled_s = int(kv["throttled_time"]) / 1e9
        if "usage_usec" in kv:
            t.usage_s = int(kv["usage_usec"]) / 1e6
        else:  # v1 keeps usage in cpuacct: the processes' own counters since add()
            t.usage_s = sum(max(_cpu_seconds(p) - c0, 0.0) for p, c0 in self.cpu0.items())
        return t

    def close(self) -> None:
        if not self.path or not os.path.isdir(self.path):
            return
        _empty(self.path, self.root)
        for _ in range(50):  # a process moving out can take a moment to leave
            try:
                os.rmdir(self.path)
                break
            except OSError:
                time.sleep(0.02)
        atexit.unregister(self.close)

    def __enter__(self) -> "CpuQuota":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0))


_PR_SET_PDEATHSIG = 1


def _busy_child(nice: int) -> Callable[[], None]:
    def child() -> None:
        """In a busy loop's child before exec: it dies with its parent, at its nice."""
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    return child


@dataclass
class BusyCores:
    """`n` processes (default: one per core) each spinning at `nice` (0:
    the machine's normal priority) until close()."""

    n: int = 0
    nice: int = 0
    procs: list[subprocess.Popen[bytes]] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        atexit.register(self.close)
        try:
            for _ in range(self.n or cores()):
                self.procs.append(subprocess.Popen(
                    [sys.executable, "-S", "-c", "while True: pass"], preexec_fn=_busy_child(self.nice),
                    stdin=subprocess.DEVNULL))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            p.wait()
        self.procs.clear()
        atexit.unregister(self.close)

    def __enter__(self) -> "BusyCores":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
