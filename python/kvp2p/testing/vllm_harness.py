"""One vLLM engine's scheduler side, for tests and benchmarks, on CPU.

What runs for real: vLLM's OffloadingSpecFactory builds its
TieringOffloadingSpec from an OffloadingConfig; get_manager() creates the
CPU region in /dev/shm (SharedOffloadRegion), the primary CPU tier, loads
Kvp2pTier through SecondaryTierFactory from {"type": "Kvp2pTier",
"module_path": "kvp2p.vllm"} and builds the TieringOffloadingManager with
its tier-poll thread. What is replayed: the calls vLLM's offloading
connector scheduler (distributed/kv_transfer/kv_connector/v1/offloading/
scheduler.py) makes on that manager in a step (under manager.lock:
on_new_request, lookup per block, prepare_store/complete_store,
prepare_load/complete_load, on_request_finished, on_schedule_end last), and
the worker's part: block bytes written into the region chunks the primary
chose (no GPU here).

`serve(conn, ...)` runs in a child process and answers commands from a
multiprocessing Pipe; `EngineProc` is the parent's handle.
"""

from __future__ import annotations

import contextlib
import hashlib
import multiprocessing as mp
import os
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from kvp2p import plugin


def manager_lock(mgr: Any) -> Any:
    """The manager's lock where vLLM has one (0.33: the scheduler holds it
    for a whole step, the tier-poll thread for a round); vLLM 0.32 has no
    lock and no other thread in the manager, so nothing to hold."""
    lock = getattr(mgr, "lock", None)
    return lock if lock is not None else contextlib.nullcontext()


def block_bytes(seed: int, size: int) -> bytes:
    out = bytearray()
    h = hashlib.sha256(b"vllm-block-%d" % seed).digest()
    while len(out) < size:
        out += h
        h = hashlib.sha256(h).digest()
    return bytes(out[:size])


def offload_key(seed: int) -> bytes:
    from vllm.v1.kv_offload.base import make_offload_key

    return make_offload_key(hashlib.sha256(b"hash-%d" % seed).digest(), 0)


def build_manager(engine_id: str, socket: str, num_chunks: int, row_stride: int,
                  tier_opts: dict[str, Any] | None = None) -> Any:
    """vLLM's own construction path for a tiering manager with Kvp2pTier:
    from {"type": "Kvp2pTier", "module_path": "kvp2p.vllm"}, or from
    {"type": "kvp2p"} when tier_opts says so (the registered name)."""
    from vllm.v1.kv_offload.config import (
        OffloadingCacheConfig,
        OffloadingConfig,
        OffloadingGroupConfig,
        OffloadingModelConfig,
        OffloadingParallelConfig,
    )
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory

    opts = dict(tier_opts or {})
    if opts.get("type") == plugin.TIER_TYPE:
        # By name, as an installed kvp2p is configured: vLLM's general
        # plugins (our vllm.general_plugins entry point) register the name.
        # kvp2p may be on the path here without being installed (no entry
        # point), so call the plugin function as vLLM's loader would.
        plugin.register()
        tier = {"socket": socket, **opts}
    else:
        tier = {"type": "Kvp2pTier", "module_path": "kvp2p.vllm", "socket": socket, **opts}
    cfg = OffloadingConfig(
        groups=(OffloadingGroupConfig(tokens_per_block=16, layer_names=("layer.0",), group_id=0),),
        worker_kv_bytes_per_block=row_stride,
        enable_kv_cache_events=False,
        extra_config={"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": num_chunks * row_stride,
                      "secondary_tiers": [tier]},
        engine_id=engine_id,
        model=OffloadingModelConfig(name="kvp2p-test", dtype="float16"),
        cache=OffloadingCacheConfig(tokens_per_hash=16, blocks_per_chunk=1),
        parallel=OffloadingParallelConfig(
            rank=0, world_size=1, tp_size=1, pp_size=1, pcp_size=1, dcp_size=1,
            data_parallel_index=0, data_parallel_size=1, data_parallel_rank_local=None,
            is_parallelism_agnostic=True),
    )
    spec = OffloadingSpecFactory.create_spec(cfg)
    assert spec.num_chunks == num_chunks and spec.kv_bytes_per_chunk == row_stride, (
        spec.num_chunks, spec.kv_bytes_per_chunk)
    return spec, spec.get_manager()


class _Engine:
    """The child's side: a manager and the replayed scheduler calls."""

    def __init__(self, engine_id: str, socket: str, num_chunks: int, row_stride: int,
                 tier_opts: dict[str, Any] | None = None) -> None:
        from kvp2p.region import Region, vllm_region_path

        self.spec, self.mgr = build_manager(engine_id, socket, num_chunks, row_stride, tier_opts)
        self.tier = self.mgr.secondary_tiers[0]
        self.row_stride = row_stride
        self.region = Region(vllm_region_path(engine_id), num_chunks, row_stride)
        self.ctxs: dict[str, Any] = {}
        self.fetches: dict[str, dict[str, Any]] = {}
        self.pending_stores: dict[str, list[bytes]] = {}

    def _end_step(self, new: tuple[str, ...] = (), preempted: tuple[str, ...] = ()) -> None:
        from vllm.v1.kv_offload.base import ScheduleEndContext

        self.mgr.on_schedule_end(ScheduleEndContext(new_req_ids=new, preempted_req_ids=preempted))

    def idle(self) -> bool:
        """A step with nothing scheduled, taken while the manager has work
        (vLLM's EngineCore.has_work). Returns whether it stepped."""
        with manager_lock(self.mgr):
            if self.mgr.has_pending_work():
                self._end_step()
                return True
        return False

    def step_once(self) -> None:
        """One step with nothing scheduled, work or not: what an engine busy
        with other requests does every few milliseconds."""
        with manager_lock(self.mgr):
            self._end_step()

    def store(self, req_id: str, params: dict | None, seeds: list[int]) -> list[int]:
        """A request computed these blocks: GPU->CPU store, then the cascade."""
        from vllm.v1.kv_offload.base import ReqContext

        ctx = ReqContext(req_id=req_id, kv_transfer_params=params)
        self.ctxs[req_id] = ctx
        keys = [offload_key(s) for s in seeds]
        seed_of = dict(zip(keys, seeds))
        with manager_lock(self.mgr):
            self.mgr.on_new_request(ctx)
            out = self.mgr.prepare_store(keys, ctx)
            assert out is not None, "primary tier full"
            chunks = [int(c) for c in out.store_spec.chunk_ids]
            for k, c in zip(out.keys_to_store, chunks):
                self.region.write(c, block_bytes(seed_of[k], self.row_stride))  # the worker's copy
            self.mgr.complete_store(out.keys_to_store, ctx)
            self._end_step(new=(req_id,))
        return chunks

    def store_begin(self, req_id: str, params: dict | None, seeds: list[int]) -> list[int]:
        """A request's prefix lookup misses and its blocks start their
        GPU->CPU store: the CPU tier says HIT_PENDING until store_end."""
        from vllm.v1.kv_offload.base import ReqContext

        ctx = ReqContext(req_id=req_id, kv_transfer_params=params)
        self.ctxs[req_id] = ctx
        keys = [offload_key(s) for s in seeds]
        seed_of = dict(zip(keys, seeds))
        with manager_lock(self.mgr):
            self.mgr.on_new_request(ctx)
            for k in keys:
                self.mgr.lookup(k, ctx)  # the scheduler's prefix lookup (MISS)
            out = self.mgr.prepare_store(keys, ctx)
            assert out is not None, "primary tier full"
            chunks = [int(c) for c in out.store_spec.chunk_ids]
            for k, c in zip(out.keys_to_store, chunks):
                self.region.write(c, block_bytes(seed_of[k], self.row_stride))
            self._end_step(new=(req_id,))
        self.pending_stores[req_id] = list(out.keys_to_store)
        return chunks

    def store_end(self, req_id: str) -> None:
        with manager_lock(self.mgr):
            self.mgr.complete_store(self.pending_stores.pop(req_id), self.ctxs[req_id])
            self._end_step()

    def finish(self, req_id: str) -> None:
        with manager_lock(self.mgr):
            self.mgr.on_request_finished(self.ctxs.pop(req_id))
            self._end_step()

    def fetch(self, req_id: str, params: dict | None, seeds: list[int], timeout: float,
              stop_at_pending: bool = False) -> dict[str, Any]:
        """A request asks for these blocks, step after step, until every one
        is a HIT in the CPU tier (loaded) or one is a MISS (prefill locally)."""
        from vllm.v1.kv_offload.base import LookupResult, ReqContext

        st = self.fetches.get(req_id)
        if st is None:
            ctx = ReqContext(req_id=req_id, kv_transfer_params=params)
            with manager_lock(self.mgr):
                self.mgr.on_new_request(ctx)
            st = {"ctx": ctx, "keys": [offload_key(s) for s in seeds], "history": []}
            self.fetches[req_id] = st
        ctx, keys, history = st["ctx"], st["keys"], st["history"]
        deadline = time.monotonic() + timeout
        outcome = "timeout"
        while time.monotonic() < deadline:
            with manager_lock(self.mgr):
                vs = [self.mgr.lookup(k, ctx) for k in keys]
                self._end_step()
            names = [v.name for v in vs]
            if not history or history[-1] != names:
                history.append(names)
            if all(v is LookupResult.HIT for v in vs):
                outcome = "hit"
                break
            if any(v is LookupResult.MISS for v in vs):
                outcome = "miss"
                break
            if stop_at_pending and all(v is LookupResult.HIT_PENDING for v in vs):
                return {"outcome": "pending", "history": history}
            time.sleep(0.002)
        data: list[bytes] = []
        if outcome == "hit":
            with manager_lock(self.mgr):
                spec = self.mgr.prepare_load(keys, ctx)  # CPU->GPU: the chunks the worker would read
                data = [self.region.read(int(c)) for c in spec.chunk_ids]
                self.mgr.complete_load(keys, ctx)
        with manager_lock(self.mgr):
            self.mgr.on_request_finished(ctx)
            self._end_step()
        del self.fetches[req_id]
        return {"outcome": outcome, "history": history, "data": data}

    def grants(self) -> int:
        """Chunks pinned for peers and not released yet."""
        with manager_lock(self.mgr):
            return self.tier.core.lent()

    def parked(self) -> int:
        """Peers' asks waiting for a block still being written."""
        with manager_lock(self.mgr):
            return len(self.tier._parked)

    def reset(self) -> float:
        """vLLM's cache reset (sleep, weight update): the tiers drain first.
        Returns how long it took."""
        t0 = time.monotonic()
        with manager_lock(self.mgr):
            self.mgr.reset_cache()
            if hasattr(self.mgr, "on_reset_flushed"):  # vLLM 0.33; 0.32 holds no promotions after a reset
                self.mgr.on_reset_flushed()
        return time.monotonic() - t0

    def info(self) -> dict[str, Any]:
        return {"tier": type(self.tier).__module__ + "." + type(self.tier).__name__,
                "registration": self.tier.core.client.registration,
                "num_chunks": self.spec.num_chunks, "row_stride": self.spec.kv_bytes_per_chunk}

    def stats(self) -> dict[str, Any]:
        """What vLLM's metrics path sees of the tier: the kvp2p metrics the
        tiering spec declares, and the manager's stats since the last call."""
        defs = type(self.spec).build_metric_definitions(self.spec.extra_config)
        st = self.mgr.get_stats()
        values = st.reduce() if st is not None else {}
        return {"defined": sorted(k for k in defs if "kvp2p" in k),
                "values": {k: v for k, v in values.items() if "kvp2p" in k}}

    def hook_times(self, n: int) -> dict[str, list[float]]:
        """The tier's own time in each scheduler hook with no work, n times."""
        from vllm.v1.kv_offload.base import ReqContext, ScheduleEndContext

        t = self.tier
        ctx = ReqContext(req_id="bench-idle", kv_transfer_params=None)
        key = offload_key(1)
        end = ScheduleEndContext(new_req_ids=(), preempted_req_ids=())
        hooks = {
            "on_new_request": lambda: t.on_new_request(ctx),
            "lookup": lambda: t.lookup(key, ctx),
            "on_schedule_end": lambda: t.on_schedule_end(end),
            "get_finished_jobs": lambda: t.get_finished_jobs(),
            "has_pending_work": lambda: t.has_pending_work(),
            "serve_external_requests": lambda: t.serve_external_requests(None),
            "on_request_finished": lambda: t.on_request_finished(ctx),
        }
        out: dict[str, list[float]] = {k: [] for k in hooks}
        with manager_lock(self.mgr):
            for _ in range(n):
                for name, f in hooks.items():
                    t0 = time.perf_counter_ns()
                    f()
                    out[name].append((time.perf_counter_ns() - t0) / 1e3)
        return out

    def busy_hook_times(self, n: int, keys_per_step: int = 64) -> dict[str, list[float]]:
        """The tier's time in the hooks of steps that do have work: a new
        symmetric request per step, its first lookups (RETRY: queued for
        the worker) and the step's end (which hands the batch over)."""
        from vllm.v1.kv_offload.base import ReqContext, ScheduleEndContext

        t = self.tier
        end = ScheduleEndContext(new_req_ids=(), preempted_req_ids=())
        keys = [offload_key(1000 + i) for i in range(keys_per_step)]
        out: dict[str, list[float]] = {"on_new_request": [], "lookup": [], "on_schedule_end": [],
                                       "on_request_finished": []}
        with manager_lock(self.mgr):
            for i in range(n):
                ctx = ReqContext(req_id=f"busy-{i}", kv_transfer_params={"remote_kv_source": {
                    "remote_host": "127.0.0.1", "remote_port": 9, "kv_request_id": f"kv-busy-{i}"}})
                t0 = time.perf_counter_ns()
                t.on_new_request(ctx)
                out["on_new_request"].append((time.perf_counter_ns() - t0) / 1e3)
                for k in keys:
                    t0 = time.perf_counter_ns()
                    t.lookup(k, ctx)
                    out["lookup"].append((time.perf_counter_ns() - t0) / 1e3)
                t0 = time.perf_counter_ns()
                t.on_schedule_end(end)
                out["on_schedule_end"].append((time.perf_counter_ns() - t0) / 1e3)
                t0 = time.perf_counter_ns()
                t.on_request_finished(ctx)
                out["on_request_finished"].append((time.perf_counter_ns() - t0) / 1e3)
        return out

    def close(self) -> None:
        self.region.close()
        self.mgr.shutdown()


def serve(conn: Connection, kind: str, engine_id: str, socket: str, num_chunks: int, row_stride: int,
          tier_opts: dict[str, Any] | None = None, idle: str = "poll") -> None:
    """The child process: build the engine, then answer commands.

    kind "manager": the tiering manager driven by replayed scheduler calls
    (_Engine); kind "scheduler": vLLM's whole v1 Scheduler with its
    OffloadingConnector (kvp2p.testing.vllm_scheduler; row_stride is the model's).

    Between commands, idle "poll" looks at the engine's work every 2 ms
    and steps while it has some: an engine that is stepping anyway (busy
    with other requests) when a peer asks. idle "block" is vLLM's idle
    EngineCore (_process_input_queue): it steps while it has work, and once
    it has none it blocks on its input queue until the next command, work
    arriving meanwhile (a peer's ask) or not. On vLLM 0.33 the manager's
    tier-poll thread still serves peers then; vLLM 0.32 has none.
    """
    eng: Any
    if kind == "scheduler":
        from kvp2p.testing.vllm_scheduler import SchedulerEngine

        eng = SchedulerEngine(engine_id, socket, num_chunks, tier_opts)
    else:
        eng = _Engine(engine_id, socket, num_chunks, row_stride, tier_opts)
    conn.send(("ready", eng.info()))
    asleep = False
    try:
        while True:
            if not conn.poll(0.002):
                if not asleep:
                    asleep = not eng.idle() and idle == "block"
                continue
            asleep = False
            cmd, args = conn.recv()
            if cmd == "close":
                break
            try:
                conn.send(("ok", getattr(eng, cmd)(*args)))
            except Exception as e:  # noqa: BLE001 - reported to the parent
                conn.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        eng.close()
        conn.send(("closed", None))


@dataclass
class EngineProc:
    """The parent's handle on one engine process."""

    engine_id: str
    proc: mp.process.BaseProcess
    conn: Connection
    info: dict[str, Any]

    @classmethod
    def start(cls, engine_id: str, socket: str, num_chunks: int, row_stride: int,
              timeout: float = 600.0, kind: str = "manager",
              tier_opts: dict[str, Any] | None = None, idle: str = "poll") -> "EngineProc":
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        p = ctx.Process(target=serve, args=(child, kind, engine_id, socket, num_chunks, row_stride, tier_opts, idle),
                        daemon=True)
        p.start()
        if not parent.poll(timeout):
            p.kill()
            raise TimeoutError(f"engine {engine_id} did not start")
        kind, info = parent.recv()
        assert kind == "ready", (kind, info)
        return cls(engine_id, p, parent, info)

    def call(self, cmd: str, *args: Any, timeout: float = 60.0) -> Any:
        self.send(cmd, *args)
        return self.result(cmd, timeout)

    def send(self, cmd: str, *args: Any) -> None:
        """Starts a command; result() collects its answer."""
        self.conn.send((cmd, args))

    def result(self, cmd: str = "", timeout: float = 60.0) -> Any:
        if not self.conn.poll(timeout):
            raise TimeoutError(f"engine {self.engine_id}: {cmd} took over {timeout}s")
        kind, val = self.conn.recv()
        if kind != "ok":
            raise RuntimeError(f"engine {self.engine_id}: {cmd}: {val}")
        return val

    def close(self) -> None:
        try:
            self.conn.send(("close", ()))
            self.conn.poll(10)
        except (BrokenPipeError, EOFError, OSError):
            pass
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
        path = f"/dev/shm/vllm_offload_{self.engine_id}.mmap"
        if os.path.exists(path):
            os.unlink(path)
