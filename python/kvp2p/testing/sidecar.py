"""Helpers for tests and benchmarks: a real `kvp2p serve` sidecar on
loopback, with its Unix socket and region directory in a temporary
directory."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvp2p.region import Region


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kvp2p_binary() -> str:
    """The kvp2p binary: $KVP2P_BIN, else `kvp2p` on PATH.

    Raises FileNotFoundError, saying how to get one, when neither names an
    executable: an installed package has no checkout to look in."""
    b = os.environ.get("KVP2P_BIN")
    if b:
        if not os.access(b, os.X_OK):
            raise FileNotFoundError(f"KVP2P_BIN={b} is not an executable kvp2p binary")
        return b
    found = shutil.which("kvp2p")
    if found:
        return found
    raise FileNotFoundError(
        "no kvp2p binary: set KVP2P_BIN to one (go build -o kvp2p ./cmd/kvp2p) "
        "or put kvp2p on PATH (go install github.com/kvp2p/kvp2p/cmd/kvp2p@latest)")


@dataclass
class Sidecar:
    """One engine's region file and its `kvp2p serve`."""

    name: str
    num_chunks: int
    row_stride: int
    dir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="kvp2p-py-"))
    port: int = field(default_factory=free_port)
    extra: list[str] = field(default_factory=list)
    # Where the engine's region lives. Default: the temporary directory,
    # where the region file is created here; otherwise (e.g. /dev/shm for
    # vLLM's own region) the engine creates it.
    region_dir: str | None = None
    # Configure slots and block_bytes on the sidecar. Default off, as
    # docs/vllm.md recommends: the sidecar takes them from the engine's
    # Register. On, a Register of another geometry is refused.
    configure_geometry: bool = False
    proc: subprocess.Popen[bytes] | None = None
    # The address peers reach it at (its peer id's host, where it listens).
    host: str = "127.0.0.1"
    # Run in the child before exec (e.g. kvp2p.testing.netns: a network
    # namespace and cgroup of its own). None: the parent's.
    preexec: Callable[[], None] | None = None

    def __post_init__(self) -> None:
        own = self.region_dir is None
        self.region_dir = self.region_dir or self.dir
        self.region_path = os.path.join(self.region_dir, f"vllm_offload_{self.name}.mmap")
        self.socket = os.path.join(self.dir, "engine.sock")
        self.log_path = os.path.join(self.dir, "sidecar.log")
        if own and not os.path.exists(self.region_path):
            Region(self.region_path, self.num_chunks, self.row_stride, create=True).close()

    @property
    def peer(self) -> tuple[str, int]:
        return self.host, self.port

    def start(self, wait: float = 10.0) -> "Sidecar":
        args = [kvp2p_binary(), "serve", "--peer-id", f"{self.host}:{self.port}",
                "--engine-socket", self.socket, "--region-dir", self.region_dir, *self.extra]
        # No chunk_bytes: the node sends min(chunk_bytes, block_bytes) per
        # frame. Setting it from row_stride set 1-byte frames whenever the
        # geometry comes from the engine's Register (num_chunks = row_stride
        # = 1 here), and every real-engine load crawled.
        if self.configure_geometry:
            args += ["--set", f"slots={self.num_chunks}", "--set", f"block_bytes={self.row_stride}"]
        if os.environ.get("KVP2P_TEST_LOG_LEVEL"):  # e.g. debug, to see why a test failed
            args += ["--log-level", os.environ["KVP2P_TEST_LOG_LEVEL"]]
        logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT, preexec_fn=self.preexec)
        logf.close()
        deadline = time.monotonic() + wait
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None:
                raise RuntimeError(f"sidecar {self.name} exited {self.proc.returncode}: {self.log()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"sidecar {self.name} did not open {self.socket}: {self.log()}")
            time.sleep(0.01)
        return self

    def kill(self) -> None:
        """SIGKILL: the sidecar dies without a word."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(5)
        if os.path.exists(self.socket):
            os.unlink(self.socket)  # so a restart's readiness check waits for the new one

    def freeze(self, timeout: float = 60.0) -> None:
        """SIGSTOP, then waits until every thread of the process has stopped
        (state T). A thread waiting for a CPU stops only once it runs: on a
        loaded machine that took over 0.2 s, and meanwhile the process looks
        starved (runnable), not frozen, to the engine's client."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + timeout
        while not self._stopped():
            if time.monotonic() > deadline:
                raise TimeoutError(f"sidecar {self.name} not stopped {timeout}s after SIGSTOP")
            time.sleep(0.01)

    def _stopped(self) -> bool:
        assert self.proc is not None
        task = f"/proc/{self.proc.pid}/task"
        for tid in os.listdir(task):
            try:
                with open(f"{task}/{tid}/stat", "rb") as f:
                    st = f.read()
            except FileNotFoundError:  # the thread exited
                continue
            if st[st.rindex(b")") + 2:].split()[0] != b"T":
                return False
        return True

    def thaw(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def log(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def status(self) -> dict[str, Any]:
        """The sidecar's /status.json (its loads in flight, peers and their
        ejections, counters): needs --metrics-addr among its flags (port 0
        is fine: the address is read from its log)."""
        found = re.findall(r'msg="metrics and status" addr=(\S+)', self.log_all())
        if not found:
            raise RuntimeError(f"sidecar {self.name} serves no status (start it with --metrics-addr)")
        with urllib.request.urlopen(f"http://{found[-1]}/status.json", timeout=30) as r:
            return json.loads(r.read())

    def log_all(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def region(self) -> Region:
        return Region(self.region_path, self.num_chunks, self.row_stride)
