"""Hosts for real engines as network namespaces on a bridge, and the
kernel's network faults between them: a rank's sockets blackholed by
nftables (drop, not reject), a partition between two hosts, a slow link
(tbf). The Python twin of internal/lab's hosts.go and netfault.go, for the
head-to-head harness (kvp2p.testing.netfleet, python/bench/h2h.py).

Layout, as the Go lab's: a bridge in a namespace of its own (nothing is
added to the machine's own namespace, even for an instant), one namespace
per host with eth0 (a veth to the bridge) and an address in 10.201.0.0/16
(the Go lab uses 10.200.0.0/16). The test process does not join the
network: it drives its engines over a pipe (a Unix socketpair, which no
network namespace affects), so a fault reaches only the tiers' traffic.

Names start with `kvp2ph2h<pid>-` (the creating process's id): `Lab.close`
removes what it made, and `clean_stale` what a run that died (SIGKILL,
power) left behind, once its pid is gone. Nothing else is touched.

A rank is told from its host's other ranks by a cgroup v2 of its own
(processes join it before they open a socket): nftables' `socket
cgroupv2` matches every socket the rank owns, listening, accepted or
dialled, whatever its port, so a rank of vLLM's tier (a ZMQ port plus
UCX's ephemeral listeners) is blackholed as exactly as a kvp2p sidecar.
Needs root, ip, nft, tc, nsenter and a cgroup2 mount.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from kvp2p.testing.procs import alive

PREFIX = "kvp2ph2h"
SUBNET = "10.201.0"  # /16 on each eth0; hosts are .1, .2, ...
TABLE = "kvp2ph2h"
CMD_TIMEOUT_S = 60.0  # one ip/nft/tc call answers in milliseconds, but under load average 30-70 one took over 10 s
_CLONE_NEWNET = 0x40000000


def missing() -> str:
    """Why the lab cannot run here, or ''."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, nftables, tc)"
    for tool in ("ip", "nft", "tc", "nsenter"):
        if shutil.which(tool) is None:
            return f"needs {tool} on PATH (apt-get install -y iproute2 nftables util-linux)"
    if not cgroup2_root():
        return "needs a cgroup2 mount (to tell one rank's sockets from its host's others)"
    try:
        sh("ip", "netns", "list")
    except (OSError, RuntimeError) as e:
        return f"ip netns does not work here: {e}"
    return ""


def cgroup2_root() -> str:
    """Where cgroup v2 is mounted ('' if nowhere): /sys/fs/cgroup on a
    unified host, /sys/fs/cgroup/unified on a hybrid one."""
    with open("/proc/self/mounts") as f:
        for line in f:
            dev, mnt, kind, *_ = line.split()
            if kind == "cgroup2":
                return mnt
    return ""


def sh(*args: str, stdin: str | None = None) -> str:
    """Runs one command; its failure says what the kernel refused."""
    p = subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=CMD_TIMEOUT_S)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {p.returncode}: {(p.stderr or p.stdout).strip()}")
    return p.stdout


def enter(ns_path: str, cgroup: str = "") -> None:
    """Moves the calling process into a cgroup (its procs file) and a
    network namespace (/run/netns/NAME); what it starts after inherits both.
    For a child just after fork or spawn, before it opens a socket. An
    empty argument leaves that one as it is."""
    if cgroup:
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    if not ns_path:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(ns_path, os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"setns {ns_path}: {os.strerror(e)}")
    finally:
        os.close(fd)


def _kill_ns(ns: str) -> None:
    """SIGKILL (and SIGCONT, in case one is stopped) every process in ns,
    until none is left, so that the namespace can go."""
    for _ in range(100):
        try:
            pids = [int(p) for p in sh("ip", "netns", "pids", ns).split()]
        except (RuntimeError, ValueError, subprocess.TimeoutExpired):
            return
        pids = [p for p in pids if p != os.getpid()]
        if not pids:
            return
        for p in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
                os.kill(p, signal.SIGCONT)
        time.sleep(0.02)


def _remove_cgroup(path: str) -> None:
    """Removes a cgroup tree (its processes are dead by now)."""
    if not os.path.isdir(path):
        return
    # A process just killed may leave its cgroup a moment later.
    for _ in range(100):
        procs = [os.path.join(r, "cgroup.procs") for r, _, files in os.walk(path) if "cgroup.procs" in files]
        if not any(open(f).read().strip() for f in procs if os.path.exists(f)):
            break
        time.sleep(0.05)
    for d in sorted((os.path.join(root, x) for root, dirs, _ in os.walk(path) for x in dirs), key=len, reverse=True):
        with contextlib.suppress(OSError):
            os.rmdir(d)
    with contextlib.suppress(OSError):
        os.rmdir(path)


def _remove(tag: str) -> None:
    """Everything named after tag: processes in its namespaces, the
    namespaces (and with them veths, bridge, nft tables and qdiscs), its cgroups."""
    try:
        names = [ln.split()[0] for ln in sh("ip", "netns", "list").splitlines() if ln.strip()]
    except (RuntimeError, subprocess.TimeoutExpired):
        names = []
    mine = [n for n in names if n.startswith(tag + "-")]
    for ns in mine:
        _kill_ns(ns)
    for ns in mine:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            sh("ip", "netns", "del", ns)
    root = cgroup2_root()
    if root:
        _remove_cgroup(os.path.join(root, tag))


def clean_stale() -> list[str]:
    """Removes what runs whose process is gone left behind; returns their tags."""
    tags: set[str] = set()
    with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
        for ln in sh("ip", "netns", "list").splitlines():
            if ln.startswith(PREFIX):
                tags.add(ln.split()[0].split("-", 1)[0])
    root = cgroup2_root()
    if root and os.path.isdir(root):
        tags.update(d for d in os.listdir(root) if d.startswith(PREFIX))
    gone = []
    for tag in sorted(tags):
        pid = tag[len(PREFIX):]
        if pid.isdigit() and not alive(int(pid)):
            _remove(tag)
            gone.append(tag)
    return gone


@dataclass
class Host:
    name: str
    ns: str
    addr: str

    @property
    def path(self) -> str:
        return f"/run/netns/{self.ns}"

    def run(self, *args: str, stdin: str | None = None) -> str:
        """A command inside the host's network namespace (nsenter, not `ip
        netns exec`: that remounts /sys, hiding the cgroup tree)."""
        return sh("nsenter", f"--net={self.path}", *args, stdin=stdin)


class Lab:
    """The bridge and the hosts; the faults; close() removes it all. Also
    removed at the interpreter's exit and on SIGTERM/SIGHUP (made into
    SystemExit, so that `finally` blocks run), and by clean_stale() after a
    SIGKILL."""

    def __init__(self, hosts: list[str]) -> None:
        if why := missing():
            raise RuntimeError(f"netns lab: {why}")
        clean_stale()
        self.tag = f"{PREFIX}{os.getpid()}"
        self.hosts: dict[str, Host] = {}
        self._cg_root = os.path.join(cgroup2_root(), self.tag)
        self._black: dict[str, set[str]] = {}  # host -> blackholed cgroups (paths relative to /sys/fs/cgroup)
        self._cut: set[tuple[str, str]] = set()
        self._closed = False
        atexit.register(self.close)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                signal.signal(sig, _exit_on_signal)
        try:
            self._make(hosts)
        except BaseException:
            self.close()
            raise

    @property
    def bridge_ns(self) -> str:
        return f"{self.tag}-br"

    def _make(self, hosts: list[str]) -> None:
        if len(hosts) > 250:
            raise ValueError("at most 250 hosts")
        os.makedirs(self._cg_root, exist_ok=True)
        br = self.bridge_ns
        sh("ip", "netns", "add", br)
        sh("ip", "-n", br, "link", "set", "lo", "up")
        sh("ip", "-n", br, "link", "add", "name", "br0", "type", "bridge")
        sh("ip", "-n", br, "link", "set", "br0", "up")
        # The bridge's filter: partitions are drops in its forward hook, so
        # that neither host's stack sees anything of the other's.
        sh("ip", "netns", "exec", br, "nft", "-f", "-",
           stdin=f"table bridge {TABLE} {{\n chain cut {{\n  type filter hook forward priority 0; policy accept;\n }}\n}}\n")
        for i, name in enumerate(hosts):
            ns, veth, addr = f"{self.tag}-{name}", f"vh{i}", f"{SUBNET}.{i + 1}"
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            # Both ends are made inside the lab's namespaces.
            sh("ip", "-n", br, "link", "add", "name", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            sh("ip", "-n", br, "link", "set", veth, "master", "br0", "up")
            sh("ip", "-n", ns, "addr", "add", f"{addr}/16", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            h = Host(name, ns, addr)
            h.run("nft", "-f", "-", stdin=(
                f"table inet {TABLE} {{\n"
                " chain in {\n  type filter hook input priority 0; policy accept;\n }\n"
                " chain out {\n  type filter hook output priority 0; policy accept;\n }\n}\n"))
            self.hosts[name] = h

    def host(self, name: str) -> Host:
        return self.hosts[name]

    def cgroup(self, name: str) -> str:
        """A cgroup of the lab's (a rank's), made if new; pass it to enter()."""
        p = os.path.join(self._cg_root, name)
        os.makedirs(p, exist_ok=True)
        return p

    def preexec(self, host: str, cgroup: str = "") -> Callable[[], None]:
        """A subprocess preexec_fn putting the child in host's namespace (and cgroup)."""
        path = self.hosts[host].path
        return lambda: enter(path, cgroup)

    # --- faults ---

    def blackhole(self, host: str, cgroup: str) -> None:
        """Drops, on host, every packet of the sockets of cgroup's processes,
        both ways: the rank's peers see silence, never a reset."""
        rel = os.path.relpath(cgroup, "/sys/fs/cgroup")  # nft resolves the path under /sys/fs/cgroup
        self._black.setdefault(host, set()).add(rel)
        self._apply_black(host)

    def unblackhole(self, host: str) -> None:
        self._black.pop(host, None)
        self._apply_black(host)

    def _apply_black(self, host: str) -> None:
        lines = [f"flush chain inet {TABLE} in", f"flush chain inet {TABLE} out"]
        for rel in sorted(self._black.get(host, ())):
            # level: the cgroup's depth in the cgroup2 hierarchy (lab tag, rank).
            lvl = len(os.path.relpath(os.path.join("/sys/fs/cgroup", rel), cgroup2_root()).split("/"))
            for chain in ("in", "out"):
                lines.append(f'add rule inet {TABLE} {chain} socket cgroupv2 level {lvl} "{rel}" counter drop')
        self.hosts[host].run("nft", "-f", "-", stdin="\n".join(lines) + "\n")

    def partition(self, a: str, b: str) -> None:
        """Drops every IP packet between hosts a and b at the bridge."""
        self._cut.add((a, b))
        self._apply_cut()

    def heal(self) -> None:
        self._cut.clear()
        self._apply_cut()

    def _apply_cut(self) -> None:
        lines = [f"flush chain bridge {TABLE} cut"]
        for a, b in sorted(self._cut):
            x, y = self.hosts[a].addr, self.hosts[b].addr
            lines += [f"add rule bridge {TABLE} cut ip saddr {x} ip daddr {y} drop",
                      f"add rule bridge {TABLE} cut ip saddr {y} ip daddr {x} drop"]
        sh("ip", "netns", "exec", self.bridge_ns, "nft", "-f", "-", stdin="\n".join(lines) + "\n")

    def slow(self, host: str, bytes_per_s: int) -> None:
        """A tbf on host's eth0: everything it sends, at most bytes_per_s
        (a slow NIC). tbf's queue holds up to a second; behind it the
        senders' socket buffers fill and their writes block."""
        burst = max(bytes_per_s // 50, 128 << 10)  # at least a 64 KiB GSO segment, or tbf drops it forever
        self.unslow(host)
        self.hosts[host].run("tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", f"{bytes_per_s}bps",
                             "burst", str(burst), "latency", "1s")

    def unslow(self, host: str) -> None:
        with contextlib.suppress(RuntimeError):  # no qdisc of ours: nothing to remove
            self.hosts[host].run("tc", "qdisc", "del", "dev", "eth0", "root")

    def dropped(self, host: str) -> int:
        """Packets the blackhole rules on host dropped so far."""
        out = self.hosts[host].run("nft", "list", "table", "inet", TABLE)
        return sum(int(w.split()[1]) for w in out.split("counter")[1:])

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        _remove(self.tag)


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def lab(hosts: list[str]) -> Iterator[Lab]:
    lb = Lab(hosts)
    try:
        yield lb
    finally:
        lb.close()
