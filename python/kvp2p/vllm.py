"""kvp2p as a vLLM secondary tier (vllm/v1/kv_offload/tiering, vLLM 0.33.0).

vLLM loads it with no patch, from kv_connector_extra_config:

    "secondary_tiers": [{"type": "Kvp2pTier", "module_path": "kvp2p.vllm",
                         "socket": "/run/kvp2p/engine.sock"}]

It behaves as vLLM's own P2P tier (tiering/p2p/manager.py) does: roles
come from kv_transfer_params; a remote_prefiller request's lookups HIT at
once; a remote_kv_source request's first lookup of a key answers RETRY and
the step's lookups go out in one batch per peer and request at
on_schedule_end; a request whose load failed answers MISS from then on;
stores of a remote_decoder request wait for the decoder's fetch; peers'
lookups are served from the CPU region through the parent's
create_store_job pins. The work goes to the engine's kvp2p sidecar, which
moves the bytes between regions; see kvp2p.tier for the threading.

Options (the tier's config dict): socket (required: the sidecar's engine
socket path, or host:port of its TCP listener), region_path (default
/dev/shm/vllm_offload_{engine_id}.mmap, as vLLM's CPU tier names it),
fingerprint (must equal the sidecar's when both are set), attach_timeout_s
(how long construction waits for the sidecar, default 2; the engine starts
without it and falls back to local prefill until it attaches),
poll_interval_s (how often the worker polls while transfers are open,
default 0.002), serve_wait_s (how long a peer's ask waits for a block still
being written into the CPU tier, default 0.25; keep it under the sidecar's
engine.serve_timeout), dead_after_s (a sidecar silent this long is taken
for hung, default 0.75; a crashed one is noticed at once), idle_serve_s
(vLLM without a tier-poll thread only, i.e. 0.32; default 0: off): keep
the engine stepping for this long after its last request activity, so that
peers asking for what it just computed are served while it is otherwise
idle; each such step is an empty engine step (about one a millisecond),
find_max_age_s (default 3: the sidecar's find.max_age at its default
interval): a peer's summary not updated for this long is not used to find a
source for a request that names none (docs/find.md).

Finding a source needs nothing in the config: with find enabled in the
sidecar, the tier mirrors its peers' summaries and a request that names no
source loads from the peer found; with find off, it answers MISS as before.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar

from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import OffloadingConnectorStats
from vllm.v1.kv_offload.base import (
    LookupResult,
    OffloadingCounterMetadata,
    OffloadingGaugeMetadata,
    OffloadingMetricMetadata,
    OffloadKey,
    OffloadPolicy,
    ReqContext,
    RequestOffloadingContext,
    ScheduleEndContext,
)
from vllm.v1.kv_offload.tiering.base import JobResult, ParentManager, SecondaryTierManager, TransferJob
from vllm.v1.metrics.cache_hit_source import CacheHitSource

from kvp2p._pb import engine_pb2 as pb
from kvp2p.keys import KeyBook, key16
from kvp2p.region import vllm_region_path
from kvp2p.tier import Done, Kind, TierCore, Verdict, ids

if TYPE_CHECKING:
    from vllm.v1.kv_offload.base import OffloadingSpec

log = logging.getLogger("kvp2p.vllm")

# The tier's own metrics, through vLLM's offloading stats (the tiering spec
# collects build_metric_definitions from every secondary tier; the manager
# aggregates get_stats). vLLM already counts per tier the lookups, hits,
# bytes read and failed promotions; these are what only kvp2p knows.
_M_STEPS = "vllm:kvp2p_steps"
_M_STEP_FAILURES = "vllm:kvp2p_step_failures"
_M_SIDECAR_LOST = "vllm:kvp2p_sidecar_lost"
_M_SERVED_CHUNKS = "vllm:kvp2p_served_chunks"
_M_ATTACHED = "vllm:kvp2p_sidecar_attached"
_FAILURE_KINDS = ("unavailable", "refused", "error")

# vLLM 0.33 polls tiers that ask for it (tolerates_off_thread_polling) from
# a tier-poll thread, between steps too; vLLM 0.32 has no such thread: a
# tier runs only inside scheduler steps, and an idle EngineCore blocks on
# its input queue, so a peer's ask waits for the engine's next step (the
# sidecar answers MISS after engine.serve_timeout). A feature check, not a
# version string.
OFF_THREAD_POLLING: bool = hasattr(SecondaryTierManager, "tolerates_off_thread_polling")

_VERDICT = {Verdict.HIT: LookupResult.HIT, Verdict.MISS: LookupResult.MISS, Verdict.RETRY: LookupResult.RETRY}


class Kvp2pTier(SecondaryTierManager):
    """vLLM secondary tier backed by a kvp2p sidecar."""

    cache_hit_source: ClassVar[CacheHitSource] = CacheHitSource.P2P
    # Peers' lookups are served between steps too (as vLLM's P2P tier), so
    # a busy engine does not hold its peers for a whole step.
    tolerates_off_thread_polling: ClassVar[bool] = True

    def __init__(
        self,
        offloading_spec: "OffloadingSpec",
        primary_kv_view: memoryview,
        tier_type: str = "Kvp2pTier",
        backpressure_detector: Any = None,
        *,
        socket: str | None = None,
        region_path: str | None = None,
        fingerprint: str = "",
        attach_timeout_s: float = 2.0,
        poll_interval_s: float = 0.002,
        serve_wait_s: float = 0.25,
        dead_after_s: float = 0.75,
        grant_hold_s: float = 5.0,
        idle_serve_s: float = 0.0,
        find_max_age_s: float = 3.0,
        hash_seed: str | None = None,
        **kwargs: Any,
    ) -> None:
        if backpressure_detector is not None:
            raise ValueError("Kvp2pTier: backpressure is not supported (as for vLLM's P2P tier)")
        if not socket:
            raise ValueError("Kvp2pTier: 'socket' (the sidecar's engine socket) is required")
        if kwargs:
            log.warning("Kvp2pTier: ignoring unknown options %s", sorted(kwargs))
        super().__init__(offloading_spec, primary_kv_view, tier_type)
        num_chunks = int(primary_kv_view.shape[0]) if primary_kv_view.shape else 0
        row_stride = self.block_size_bytes
        engine_id = str(offloading_spec.config.engine_id)
        self.region_path = region_path or vllm_region_path(engine_id)
        register = pb.Register(
            api_version=pb.API_VERSION_1, engine_id=engine_id, region_path=self.region_path,
            num_chunks=num_chunks, row_stride=row_stride, fingerprint=fingerprint.encode(),
            # vLLM's block hashes depend on PYTHONHASHSEED: the sidecar refuses
            # a seed other than its hash_seed (when both are set).
            hash_seed=hash_seed if hash_seed is not None else os.environ.get("PYTHONHASHSEED", ""),
        )
        self.core = TierCore(socket, register, poll_interval=poll_interval_s, grant_hold=grant_hold_s,
                             client_opts={"dead_after": dead_after_s}, summary_max_age=find_max_age_s)
        self._loads: dict[int, list[OffloadKey]] = {}  # load job -> its keys, for successful_keys
        self._book = KeyBook(max(4 * num_chunks, 1024))
        self._serve_wait = serve_wait_s
        self._parked: list[tuple[pb.ServeAsk, float, int]] = []  # asks waiting for a block being written
        self._attached_reported: int | None = None  # the gauge's last value given to vLLM
        # Without a tier-poll thread, has_pending_work keeps vLLM's EngineCore
        # stepping (and so serving peers) until this monotonic time.
        self._idle_serve = max(0.0, float(idle_serve_s)) if not OFF_THREAD_POLLING else 0.0
        self._awake_until = 0.0
        self.core.start()
        if not self.core.client.wait_attached(attach_timeout_s):
            log.warning("Kvp2pTier: sidecar at %s not attached yet (%s); P2P falls back to local "
                        "prefill until it is", socket, self.core.client.last_error)
        log.info("Kvp2pTier: engine %s, region %s (%d chunks of %d bytes), sidecar %s",
                 engine_id, self.region_path, num_chunks, row_stride, socket)
        if not OFF_THREAD_POLLING:
            log.warning("Kvp2pTier: this vLLM has no tier-poll thread (vLLM 0.32): peers are served only while "
                        "this engine steps; while it is idle a peer's lookup waits the sidecar's "
                        "engine.serve_timeout, then hears MISS and prefills locally (idle_serve_s=%g keeps "
                        "it stepping that long after its last request)", self._idle_serve)
        elif idle_serve_s:
            log.info("Kvp2pTier: idle_serve_s ignored: vLLM's tier-poll thread serves peers between steps")

    # -- lookups and requests ---------------------------------------------

    def lookup(self, key: OffloadKey, req_context: ReqContext) -> LookupResult:
        h = key16(key)
        # This engine is about to compute or load this block: remember its
        # key, so a peer asking for it while it is still being written can
        # wait for it (serve_external_requests) instead of hearing MISS.
        self._book.remember(h, key)
        return _VERDICT[self.core.lookup(req_context.req_id, h)]

    def _active(self) -> None:
        """Request activity (scheduler thread): see idle_serve_s."""
        if self._idle_serve:
            self._awake_until = time.monotonic() + self._idle_serve

    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext:
        self._active()
        roles = self.core.new_request(req_context.req_id, req_context.kv_transfer_params)
        if roles.dest is not None and roles.dest.kv_request_id:
            # The decoder needs every block of the request, not only the
            # ones this request computed (as vLLM's P2P tier).
            return RequestOffloadingContext(policy=OffloadPolicy.REQUEST_LEVEL)
        return RequestOffloadingContext()

    def on_request_finished(self, req_context: ReqContext) -> None:
        self._active()
        self.core.request_finished(req_context.req_id)

    def on_schedule_end(self, context: ScheduleEndContext) -> None:
        self.core.schedule_end(context.preempted_req_ids)

    # -- jobs -----------------------------------------------------------------

    def submit_load(self, job_metadata: TransferJob) -> None:
        keys = list(job_metadata.keys)
        self._loads[job_metadata.job_id] = keys
        self.core.submit_load(job_metadata.job_id, job_metadata.req_context.req_id,
                               [key16(k) for k in keys], ids(job_metadata.chunk_ids))

    def submit_store(self, job_metadata: TransferJob) -> None:
        self._active()
        keys = list(job_metadata.keys)
        k16s = [key16(k) for k in keys]
        book = self._book
        for k, h in zip(keys, k16s):
            book.remember(h, k)  # so a peer asking for h can be served
        self.core.submit_store(job_metadata.job_id, job_metadata.req_context.req_id,
                                k16s, ids(job_metadata.chunk_ids))

    def get_finished_jobs(self) -> Iterable[JobResult]:
        return [self._result(d) for d in self.core.take_finished()]

    def _result(self, d: Done) -> JobResult:
        keys = self._loads.pop(d.job_id, None) if d.kind == Kind.LOAD else None
        successful = None
        if keys is not None:
            loaded = keys if d.success else [keys[i] for i in (d.successful or ()) if i < len(keys)]
            for k in loaded:
                self._book.remember(key16(k), k)  # loaded blocks can be served on
            if not d.success and d.successful:
                successful = loaded
        return JobResult(job_id=d.job_id, success=d.success, successful_keys=successful,
                         transfer_time=d.transfer_s, transfer_bytes=d.nbytes)

    @classmethod
    def build_metric_definitions(cls, extra_config: dict[str, Any]) -> dict[str, OffloadingMetricMetadata]:
        return {
            _M_STEPS: OffloadingCounterMetadata("Step calls the kvp2p sidecar answered."),
            _M_STEP_FAILURES: OffloadingCounterMetadata(
                "Step calls that failed, by reason: unavailable (no sidecar; the step's loads fail and its "
                "requests prefill locally), refused (a bad step), error.", labelnames=("reason",)),
            _M_SIDECAR_LOST: OffloadingCounterMetadata("Times the kvp2p sidecar was lost (crashed, hung or restarted)."),
            _M_SERVED_CHUNKS: OffloadingCounterMetadata("CPU-tier chunks pinned for peers' loads."),
            _M_ATTACHED: OffloadingGaugeMetadata("1 while the kvp2p sidecar is attached, else 0."),
        }

    def get_stats(self) -> OffloadingConnectorStats | None:
        counts = self.core.take_counts()
        stats = OffloadingConnectorStats()
        if n := counts.get("steps"):
            stats.increase_counter(_M_STEPS, n)
        for kind in _FAILURE_KINDS:
            if n := counts.get(f"step_failures_{kind}"):
                stats.increase_counter(_M_STEP_FAILURES, n, (kind,))
        if n := counts.get("sidecar_lost"):
            stats.increase_counter(_M_SIDECAR_LOST, n)
        if n := counts.get("served_chunks"):
            stats.increase_counter(_M_SERVED_CHUNKS, n)
        attached = 1 if self.core.client.registration else 0
        if attached != self._attached_reported:  # a gauge: its changes are enough
            stats.set_gauge(_M_ATTACHED, attached)
            self._attached_reported = attached
        return None if stats.is_empty() else stats

    def has_pending_work(self) -> bool:
        if self._idle_serve and time.monotonic() < self._awake_until:
            return True  # idle_serve_s: stay stepping so that peers are served
        return bool(self._parked) or self.core.has_pending_work()

    def drain_jobs(self) -> None:
        self.core.drain()

    # -- serving peers --------------------------------------------------------

    def serve_external_requests(self, parent: ParentManager) -> None:
        """Pins what peers asked for (the sidecar's ServeAsks), under the
        manager's lock: a HIT and its pin are not separated by an eviction.

        As vLLM's P2P server, a block still being written into the CPU tier
        (HIT_PENDING) or behind another tier (RETRY) is waited for: the ask
        is looked at again at the next call, for up to serve_wait_s; then
        what is there is granted and the rest answers MISS."""
        now = time.monotonic()
        gen = self.core.generation
        asks = [(a, d) for a, d, g in self._parked if g == gen]
        asks += [(a, now + self._serve_wait) for a in self.core.take_asks()]
        self._parked = []
        for ask, deadline in asks:
            self._serve(parent, ask, now < deadline, deadline, gen)

    def _serve(self, parent: ParentManager, ask: pb.ServeAsk, may_wait: bool, deadline: float, gen: int) -> None:
        ctx = ReqContext(req_id=f"kvp2p-serve:{ask.ask_id}")
        parent.on_new_request(ctx)
        try:
            hits: list[OffloadKey] = []
            hit16: list[bytes] = []
            waiting = False
            for h in dict.fromkeys(ask.keys):
                key = self._book.get(h)
                if key is None:
                    continue
                res = parent.lookup(OffloadKey(key), ctx)
                if res is LookupResult.HIT:
                    hits.append(OffloadKey(key))
                    hit16.append(h)
                elif res is not LookupResult.MISS:
                    waiting = True
            if waiting and may_wait:
                self._parked.append((ask, deadline, gen))
            elif hits:
                job = parent.create_store_job(hits, ctx)
                self.core.grant(ask.ask_id, job.job_id, hit16, ids(job.chunk_ids))
            else:
                self.core.grant(ask.ask_id, None, [], [])
        finally:
            parent.on_request_finished(ctx)

    def shutdown(self) -> None:
        self.core.close()
