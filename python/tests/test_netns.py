"""kvp2p.testing.netns, the head-to-head's network lab, with plain sockets
(no engines): two hosts on a bridge reach each other; a rank's cgroup
blackholed is silent (a connect times out, no reset) while its host's
other rank still answers; a partition cuts both ways and heals; a tbf
slows what a host sends; and close() leaves no namespace, cgroup or
process behind. Skipped unless root with ip, nft, tc, nsenter and cgroup2.
A few seconds."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from kvp2p.testing import netns

pytestmark = pytest.mark.skipif(bool(netns.missing()), reason=f"netns lab: {netns.missing()}")

# A server: accepts and answers one byte per connection; with a size, it
# sends that many bytes instead.
SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(16)
print("up", flush=True)
while True:
    c, _ = s.accept()
    c.sendall(b"x" * int(sys.argv[3]))
    c.close()
"""


@pytest.fixture
def lab() -> Iterator[netns.Lab]:
    lb = netns.Lab(["a", "b"])
    try:
        yield lb
    finally:
        lb.close()


def serve(lb: netns.Lab, host: str, port: int, cgroup: str = "", size: int = 1) -> subprocess.Popen[bytes]:
    p = subprocess.Popen([sys.executable, "-c", SERVER, lb.host(host).addr, str(port), str(size)],
                         stdout=subprocess.PIPE, preexec_fn=lb.preexec(host, cgroup))
    assert p.stdout is not None and p.stdout.readline() == b"up\n"
    return p


def fetch(lb: netns.Lab, host: str, to: str, port: int, timeout: float = 1.0) -> str:
    """From host, connect to `to`:port and read to the end: 'ok N secs',
    'timeout' or the error's name."""
    code = (f"import socket,time\nt=time.monotonic()\n"
            f"try:\n s=socket.create_connection(('{lb.host(to).addr}',{port}),timeout={timeout})\n n=0\n"
            f" while (b:=s.recv(1<<16)): n+=len(b)\n print('ok',n,time.monotonic()-t)\n"
            f"except TimeoutError: print('timeout')\nexcept OSError as e: print(type(e).__name__)\n")
    return lb.host(host).run(sys.executable, "-c", code).strip()


def test_faults_and_cleanup(lab: netns.Lab) -> None:
    rank0, rank1 = lab.cgroup("a0"), lab.cgroup("a1")
    procs = [serve(lab, "a", 7000, rank0), serve(lab, "a", 7001, rank1), serve(lab, "a", 7002, size=4 << 20)]
    try:
        assert fetch(lab, "b", "a", 7000).startswith("ok 1 ")
        assert fetch(lab, "b", "a", 7001).startswith("ok 1 ")

        # A blackholed rank is silent (drop, not reject); its sibling answers.
        lab.blackhole("a", rank1)
        assert fetch(lab, "b", "a", 7001, timeout=0.5) == "timeout"
        assert fetch(lab, "b", "a", 7000).startswith("ok 1 ")
        assert lab.dropped("a") > 0
        lab.unblackhole("a")
        assert fetch(lab, "b", "a", 7001).startswith("ok 1 ")

        # A partition cuts both ways and heals.
        lab.partition("a", "b")
        assert fetch(lab, "b", "a", 7000, timeout=0.5) == "timeout"
        assert fetch(lab, "a", "b", 9, timeout=0.5) == "timeout"  # not ConnectionRefused: nothing arrives
        lab.heal()
        assert fetch(lab, "b", "a", 7000).startswith("ok 1 ")
        assert fetch(lab, "a", "b", 9) == "ConnectionRefusedError"

        # A slow link: 4 MiB at 1 MiB/s takes seconds, against a fraction unslowed.
        fast = float(fetch(lab, "b", "a", 7002, timeout=30).split()[2])
        lab.slow("a", 1 << 20)
        got = fetch(lab, "b", "a", 7002, timeout=30).split()
        lab.unslow("a")
        assert got[:2] == ["ok", str(4 << 20)]
        # tbf passes a burst, then the rate: at least 3 s for the rest.
        assert float(got[2]) > max(2.5, 3 * fast), (fast, got)
    finally:
        for p in procs:
            p.kill()
            p.wait()

    # close() kills what runs in the namespaces and removes everything.
    straggler = serve(lab, "a", 7003)
    tag = lab.tag
    lab.close()
    deadline = time.monotonic() + 5
    while straggler.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert straggler.poll() is not None
    assert not [n for n in netns.sh("ip", "netns", "list").split() if n.startswith(tag)]
    assert not os.path.exists(os.path.join(netns.cgroup2_root(), tag))


def test_stale_leftovers_removed() -> None:
    """What a run killed by SIGKILL left (its pid gone) goes at the next start."""
    code = ("import os,sys\nfrom kvp2p.testing import netns\nlb=netns.Lab(['x'])\n"
            "print(lb.tag,flush=True)\nos.kill(os.getpid(),9)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    tag = p.stdout.strip()
    assert tag.startswith(netns.PREFIX), p.stderr
    assert [n for n in netns.sh("ip", "netns", "list").split() if n.startswith(tag)]
    assert tag in netns.clean_stale()
    assert not [n for n in netns.sh("ip", "netns", "list").split() if n.startswith(tag)]
    assert not os.path.exists(os.path.join(netns.cgroup2_root(), tag))


def test_enter_moves_into_namespace(lab: netns.Lab) -> None:
    """A child that enter()s has the host's address, not the machine's."""
    code = (f"from kvp2p.testing.netns import enter\nenter('{lab.host('b').path}')\n"
            "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
            f"s.bind(('{lab.host('b').addr}',0))\nprint('bound')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=30)
    assert out.stdout.strip() == "bound", out.stderr
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s, pytest.raises(OSError):
        s.bind((lab.host("b").addr, 0))  # not an address of the machine's own namespace
