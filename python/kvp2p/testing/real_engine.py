"""A real vLLM engine (a model that computes and reads KV) in a child
process, for the end-to-end tests, the demo and the benchmark.

The child runs vLLM's LLMEngine with the OffloadingConnector, the CPU
tier (kvp2p.cpu_worker's spec, so it runs on vLLM's CPU build) and, when a
sidecar socket is given, Kvp2pTier. It steps the engine itself and takes
commands from the parent between steps, so requests can overlap (a request
added while another runs), as in a serving engine.

The child is the leader of its own process group: `kill()` takes it down
with vLLM's engine-core and worker processes at once, as a crash would.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

SLOW_STEP_S = 1.0  # an engine step this long is reported on stderr
_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")


@dataclass
class EngineConfig:
    engine_id: str
    model_dir: str
    socket: str | None = None  # the kvp2p sidecar's engine socket; None: no kvp2p tier
    cpu_bytes: int = 64 << 20  # the CPU tier (the region the sidecar serves from)
    kv_cache_gb: int = 1  # the engine's own KV cache (VLLM_CPU_KVCACHE_SPACE)
    max_model_len: int = 2048
    block_size: int = 32
    dtype: str = "bfloat16"
    tier_opts: dict[str, Any] = field(default_factory=dict)
    offload: bool = True  # False: no connector at all (the benchmark's "not attached")
    threads: int = 0  # torch threads in the worker (0: vLLM's default)
    # The engine's processes run at this niceness. vLLM's engine core and
    # worker spin (sched_yield) for a second after each message, and two
    # engines on 2 cores starve the sidecars of CPU for seconds: a
    # deployment gives the sidecar its own CPU (a container with its own
    # request); here, a lower priority for the engines does that
    # (own_group_below: in the test's own session, for niceness to count).
    nice: int = 10
    # Instead of Kvp2pTier on `socket`: these secondary_tiers entries as
    # given (e.g. vLLM's own {"type": "p2p", ...}); None: from `socket`.
    secondary_tiers: list[dict[str, Any]] | None = None
    env: dict[str, str] = field(default_factory=dict)  # set in the child before vLLM starts
    # Where the engine's processes run (kvp2p.testing.netns): a network
    # namespace (/run/netns/NAME) and a cgroup directory, joined before
    # vLLM opens a socket. Empty: the parent's.
    netns: str = ""
    cgroup: str = ""


@dataclass
class Result:
    req_id: str
    tokens: list[int]
    cached: int  # prompt tokens not computed: local prefix cache + loaded from outside
    seconds: float  # from add to finish, as the child saw it
    ttft: float | None  # from add to the first token, as the child saw it
    by_source: dict[str, int]  # prompt_tokens_cached_by_source deltas over the request's life


def kv_transfer_config(cfg: EngineConfig) -> Any:
    from vllm.config import KVTransferConfig

    extra: dict[str, Any] = {"spec_name": "CPUTieringOffloadingSpec", "spec_module_path": "kvp2p.cpu_worker",
                             "cpu_bytes_to_use": cfg.cpu_bytes}
    if cfg.secondary_tiers is not None:
        extra["secondary_tiers"] = cfg.secondary_tiers
    elif cfg.socket:
        extra["secondary_tiers"] = [{"type": "Kvp2pTier", "module_path": "kvp2p.vllm", "socket": cfg.socket,
                                     **cfg.tier_opts}]
    return KVTransferConfig(kv_connector="OffloadingConnector", kv_role="kv_both", engine_id=cfg.engine_id,
                            kv_connector_extra_config=extra)


def _sources(engine: Any) -> dict[str, int]:
    out = dict.fromkeys(_SOURCES, 0)
    for m in engine.get_metrics():
        if m.name == "vllm:prompt_tokens_cached_by_source" and m.labels.get("source") in out:
            out[m.labels["source"]] += int(m.value)
    return out


def _child(conn: Connection, cfg: EngineConfig) -> None:
    try:
        _serve(conn, cfg)
    except BaseException:
        import traceback

        conn.send(("error", traceback.format_exc()))
        raise


def own_group_below(nice: int) -> None:
    """Makes this process the leader of a process group of its own (so that
    one killpg reaches vLLM's processes under it) in the caller's session,
    and runs it, and those it starts, at niceness `nice`.

    Not a session of its own (setsid): where the kernel schedules by
    session (CONFIG_SCHED_AUTOGROUP, on by default in many distributions'
    kernels), a process's niceness orders it only within its session, and
    an engine in a session of its own at nice 10 got as much CPU as the
    whole test session, sidecars included (measured: a nice-10 loop in its
    own session ran as fast as a nice-0 one). Renicing that session
    (/proc/self/autogroup) was not enough either: a sidecar, mostly asleep,
    then still waited up to 0.5-0.8 s for a CPU after waking while the
    engines computed (a session's share on a CPU follows its recent load).
    In the caller's session, niceness orders each process against each."""
    os.setpgid(0, 0)
    if nice:
        os.nice(nice)


def _serve(conn: Connection, cfg: EngineConfig) -> None:
    if cfg.netns or cfg.cgroup:
        from kvp2p.testing.netns import enter

        enter(cfg.netns, cfg.cgroup)
    own_group_below(cfg.nice)  # inherited by vLLM's engine core and worker processes
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(cfg.kv_cache_gb))
    os.environ.update(cfg.env)
    if cfg.threads:
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"
        os.environ["OMP_NUM_THREADS"] = str(cfg.threads)
    from vllm import SamplingParams
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine.llm_engine import LLMEngine

    args = EngineArgs(model=cfg.model_dir, dtype=cfg.dtype, block_size=cfg.block_size, enforce_eager=True,
                      enable_prefix_caching=True, max_model_len=cfg.max_model_len, seed=0,
                      disable_log_stats=False,
                      kv_transfer_config=kv_transfer_config(cfg) if cfg.offload else None)
    t0 = time.monotonic()
    engine = LLMEngine.from_engine_args(args)
    conn.send(("ready", {"start_s": time.monotonic() - t0, "pid": os.getpid()}))
    running: dict[str, tuple[float, float | None, dict[str, int]]] = {}  # req -> (added, first token, sources)
    # Filler traffic ("fill"): one request at a time, added again each time
    # it finishes, until "unfill"; its outputs are not reported.
    filler: tuple[list[int], int] | None = None
    fill_id, fill_n, fill_ack = "", 0, False

    def add_filler() -> None:
        nonlocal fill_id, fill_n
        assert filler is not None
        fill_n += 1
        fill_id = f"{cfg.engine_id}-fill-{fill_n}"
        engine.add_request(fill_id, {"prompt_token_ids": list(filler[0])},
                           SamplingParams(temperature=0.0, max_tokens=filler[1], ignore_eos=True))

    while True:
        busy = engine.has_unfinished_requests()
        if conn.poll(0 if busy else None):
            cmd, *a = conn.recv()
            if cmd == "add":
                req_id, prompt, max_tokens, params = a
                extra = {"kv_transfer_params": params} if params else None
                sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, extra_args=extra)
                # Outputs carry the id given here (add_request returns it
                # with an internal suffix).
                engine.add_request(req_id, {"prompt_token_ids": list(prompt)}, sp)
                running[req_id] = (time.monotonic(), None, _sources(engine))
                continue
            if cmd == "fill":
                filler, fill_ack = (list(a[0]), int(a[1])), True
                add_filler()
                continue
            if cmd == "unfill":
                if filler is not None:
                    engine.abort_request([fill_id])
                filler = None
                conn.send(("unfill", None))
                continue
            if cmd == "reset":
                conn.send(("reset", engine.reset_prefix_cache()))
                continue
            if cmd == "metrics":  # counters whose name has this substring, by name and labels
                conn.send(("metrics", {(m.name, tuple(sorted(m.labels.items()))): m.value
                                       for m in engine.get_metrics()
                                       if a[0] in m.name and isinstance(getattr(m, "value", None), (int, float))}))
                continue
            if cmd == "close":
                conn.send(("close", None))
                return
            conn.send(("error", f"unknown command {cmd}"))
            continue
        if not busy:
            continue
        t_step = time.monotonic()
        outs = engine.step()
        if (took := time.monotonic() - t_step) > SLOW_STEP_S:
            # A peer's lookup waits for this engine's next step (vLLM 0.32):
            # a long one explains a fallback the tests would otherwise not.
            print(f"[{cfg.engine_id}] engine step took {took:.2f}s ({len(running)} requests)", file=sys.stderr, flush=True)
        for out in outs:
            if filler is not None and out.request_id == fill_id:
                if fill_ack and out.outputs and out.outputs[0].token_ids:
                    conn.send(("fill", None))  # it runs: the engine steps
                    fill_ack = False
                if out.finished:
                    add_filler()
                continue
            if out.request_id not in running:
                continue  # not a request the parent added
            added, first, before = running[out.request_id]
            if first is None and out.outputs and out.outputs[0].token_ids:
                first = time.monotonic()
                running[out.request_id] = (added, first, before)
            if not out.finished:
                continue
            del running[out.request_id]
            after = _sources(engine)
            conn.send(("result", Result(
                req_id=out.request_id, tokens=list(out.outputs[0].token_ids), cached=out.num_cached_tokens or 0,
                seconds=time.monotonic() - added, ttft=None if first is None else first - added,
                by_source={k: after[k] - before[k] for k in _SOURCES if after[k] != before[k]})))


class RealEngine:
    """The parent's handle on one engine process."""

    def __init__(self, cfg: EngineConfig, proc: Any, conn: Connection, info: dict[str, Any]) -> None:
        self.cfg = cfg
        self.proc = proc
        self.conn = conn
        self.info = info
        self._results: dict[str, Result] = {}
        self._seq = 0

    @classmethod
    def spawn(cls, cfg: EngineConfig) -> "RealEngine":
        """Starts the process; ready() waits for the engine (start several
        engines, then wait for them, to overlap their start)."""
        # vLLM's block hashes depend on PYTHONHASHSEED: the same across the
        # fleet, or no key ever hits. A spawned child reads it at its start.
        os.environ.setdefault("PYTHONHASHSEED", "0")
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_child, args=(child, cfg), name=f"engine-{cfg.engine_id}", daemon=False)
        proc.start()
        child.close()
        return cls(cfg, proc, parent, {})

    def ready(self, timeout: float = 600.0) -> "RealEngine":
        if not self.conn.poll(timeout):
            self.kill()
            raise TimeoutError(f"engine {self.cfg.engine_id} did not start in {timeout}s")
        try:
            tag, info = self.conn.recv()
        except EOFError:
            self.proc.join(5)
            raise RuntimeError(f"engine {self.cfg.engine_id} exited {self.proc.exitcode} at start") from None
        if tag != "ready":
            self.kill()
            raise RuntimeError(f"engine {self.cfg.engine_id} failed to start: {info}")
        self.info = info
        return self

    @classmethod
    def start(cls, cfg: EngineConfig, timeout: float = 600.0) -> "RealEngine":
        return cls.spawn(cfg).ready(timeout)

    @property
    def region_path(self) -> str:
        from kvp2p.region import vllm_region_path

        return vllm_region_path(self.cfg.engine_id)

    def add(self, prompt: list[int], max_tokens: int = 8, params: dict[str, Any] | None = None,
            req_id: str | None = None) -> str:
        """Adds a request (greedy); returns its id. `result(id)` waits for it."""
        self._seq += 1
        rid = req_id or f"{self.cfg.engine_id}-r{self._seq}"
        self.conn.send(("add", rid, prompt, max_tokens, params))
        return rid

    def _recv(self, timeout: float) -> tuple[str, Any]:
        if not self.conn.poll(timeout):
            raise TimeoutError(f"engine {self.cfg.engine_id}: no answer in {timeout}s")
        return self.conn.recv()

    def result(self, rid: str, timeout: float = 300.0) -> Result:
        deadline = time.monotonic() + timeout
        while True:
            if rid in self._results:
                return self._results.pop(rid)
            tag, val = self._recv(max(deadline - time.monotonic(), 0.0))
            self._file(tag, val)

    def _file(self, tag: str, val: Any) -> None:
        if tag == "result":
            self._results[val.req_id] = val
        elif tag == "error":
            raise RuntimeError(val)

    def run(self, prompt: list[int], max_tokens: int = 8, params: dict[str, Any] | None = None,
            timeout: float = 300.0) -> Result:
        return self.result(self.add(prompt, max_tokens, params), timeout)

    @contextlib.contextmanager
    def kept_busy(self, prompt: list[int], max_tokens: int) -> Iterator[None]:
        """Keeps the engine serving traffic while the block runs: a request
        of the prompt, added again each time it finishes (a request that
        ran out of tokens mid-block left the engine idle), then aborted.

        vLLM 0.32's engine core steps only while it has requests (it has no
        tier-poll thread): an idle engine never serves a peer's lookup. A
        producer serving traffic does."""
        self.fill(prompt, max_tokens)
        try:
            yield
        finally:
            self.unfill()

    def fill(self, prompt: list[int], max_tokens: int) -> None:
        """Starts kept_busy's traffic; returns once it runs."""
        self._call("fill", prompt, max_tokens)

    def unfill(self) -> None:
        self._call("unfill")

    def _call(self, tag: str, *args: Any) -> Any:
        self.conn.send((tag, *args))
        while True:
            got, val = self._recv(120.0)
            if got == tag:
                return val
            self._file(got, val)

    def reset_prefix_cache(self) -> bool:
        return bool(self._call("reset"))

    def metrics(self, substring: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """vLLM's counters and gauges whose name contains substring."""
        return self._call("metrics", substring)

    def kill(self) -> None:
        """SIGKILL to the engine and all of vLLM's processes under it."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.join(10)

    def close(self) -> None:
        if self.proc.is_alive():
            try:
                self.conn.send(("close",))
                self._recv(30.0)
            except (OSError, EOFError, TimeoutError):
                pass
        self.kill()  # vLLM's engine-core may outlive a clean exit by seconds; do not wait for it
        self.conn.close()
        # Killed, vLLM does not remove its region from /dev/shm.
        if self.cfg.offload and os.path.exists(self.region_path):
            os.unlink(self.region_path)
