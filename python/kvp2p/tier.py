"""The tier's logic without vLLM's types: what the vLLM plugin (kvp2p.vllm)
and the tests drive.

Threads. vLLM calls the hooks (lookup, submit_*, on_schedule_end, ...) from
its scheduler thread or its tier-poll thread, never two at once. Those hooks
only touch memory: they queue the step's work and read answers already in.
A worker thread sends the queued work as one Step per scheduler step (and
polls the sidecar every `poll_interval` while jobs or lookups are open),
and files the answers. The client's threads deliver asks, releases and the
sidecar's loss. One lock guards the state they share; nothing holds it
across a call to the sidecar.

Answers reach vLLM only between lookup passes. vLLM looks a request's
blocks up one by one (a pass) and promotes the HITs it saw as one load
job per request and step; a pass that saw some blocks HIT and the rest
RETRY (the answers landed in the middle of it) would promote them as two
jobs in two steps (issue 23). So the worker files the sidecar's verdicts
in a pending buffer (_incoming), and the scheduler thread publishes them
at a pass boundary: the step's end (schedule_end, after every lookup of
the step) and the first lookup of a step. Within a step the verdicts a
lookup reads do not change, except to MISS: a request that failed
answers MISS at once (its jobs fail at once too, so nothing is gained by
waiting).

Ids. vLLM numbers jobs from 0; the API reserves 0, so a job's id on the API
is vLLM's plus one (pin ids too: a grant names the store job vLLM made for
it, plus one).

Failure. A request whose load failed, or that was registered with a sidecar
since lost, answers MISS from then on (vLLM prefills it locally); its new
jobs fail at once. When the sidecar is lost every job in flight fails (the
sidecar revokes the region as soon as it learns the stream is gone, so no
late peer write reaches a chunk vLLM reuses). Grants are held longer: a
sidecar that is alive but was frozen may still be sending a granted chunk
to a peer once it runs again, so the chunk must not change under it. They
are released when the sidecar registers again (it refuses that while an
old chunk is in use) or when its process has exited, however long that
takes: the step socket names the process (SidecarProcess). Only when the
process is unknown (no step socket) are they released after `grant_hold`
seconds, which a longer freeze outlasts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from kvp2p import roles as roles_mod
from kvp2p._pb import engine_pb2 as pb
from kvp2p.client import EngineClient, SidecarProcess, SidecarUnavailable, StepRefused
from kvp2p.roles import Roles

log = logging.getLogger("kvp2p.tier")


class Verdict(IntEnum):
    HIT = pb.VERDICT_HIT
    MISS = pb.VERDICT_MISS
    RETRY = pb.VERDICT_RETRY


class Kind(IntEnum):
    LOAD = pb.JOB_KIND_LOAD
    STORE = pb.JOB_KIND_STORE
    PIN = 100  # a grant's pin, released by the sidecar


@dataclass(slots=True)
class Done:
    """A finished job, in vLLM's numbering."""

    job_id: int
    kind: Kind
    success: bool
    successful: list[int] | None = None  # indices loaded, on a partial failure
    transfer_s: float | None = None
    nbytes: int | None = None
    reason: str = ""


# Items (requests, batches, jobs, ids) in one Step: well under the
# sidecar's limit (16384 by default; Registered does not state it).
_MAX_ITEMS = 4096
# A peer's ask that waited longer than this for the engine's scheduler step
# is logged (a warning): its requester is then likely to fall back.
ASK_WAIT_WARN_S = 1.0

_PREEMPTED = -2  # registered before, forgotten by the sidecar: register again on use
_LOST = -1  # registered with a sidecar since lost: fall back for good


@dataclass(slots=True)
class _Req:
    roles: Roles
    gen: int  # the client generation it is registered under, or _PREEMPTED / _LOST
    # PD decode side: the sidecar answered HIT once, so its session to the
    # prefiller is up and every further key is a HIT at once, as in vLLM.
    # Until then lookups ask the sidecar, which answers RETRY while it
    # connects: kvp2p never queues a load behind a handshake.
    pd_ready: bool = False


@dataclass(slots=True)
class _Job:
    req_id: str
    kind: Kind
    sent: bool = False


@dataclass(slots=True)
class _Out:
    new_requests: list[pb.NewRequest] = field(default_factory=list)
    loads: list[pb.Job] = field(default_factory=list)
    stores: list[pb.Job] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    end_step: bool = False

    def empty(self) -> bool:
        return not (self.new_requests or self.loads or self.stores or self.finished or self.preempted or self.end_step)


# What TierCore counts (take_counts): successful Step calls; failed ones by
# kind (the sidecar unavailable, a step refused, any other error); sidecars
# lost; chunks the engine pinned for peers.
COUNTS = ("steps", "step_failures_unavailable", "step_failures_refused", "step_failures_error",
          "sidecar_lost", "served_chunks")


class TierCore:
    """One engine's side of the engine API, batched per scheduler step."""

    def __init__(
        self,
        socket: str,
        register: pb.Register,
        *,
        poll_interval: float = 0.002,
        grant_hold: float = 5.0,
        client_opts: Mapping[str, Any] | None = None,
    ) -> None:
        self._mu = threading.Lock()
        self._cv = threading.Condition(self._mu)
        self._gen = 0  # bumped when the sidecar is lost
        self._reqs: dict[str, _Req] = {}
        self._failed: set[str] = set()
        self._verdicts: dict[str, dict[bytes, Verdict]] = {}  # what lookups read
        # Answers filed by the worker, not yet published (see "Answers" above).
        self._incoming: dict[str, dict[bytes, Verdict]] = {}
        self._incoming_pd: set[str] = set()  # PD requests the sidecar answered HIT
        self._pass_open = False  # a step's lookups began: nothing is published until its end
        self._asking: dict[str, dict[bytes, None]] = {}  # ordered sets
        self._jobs: dict[int, _Job] = {}  # API job id -> job
        self._out = _Out()
        self._done: list[Done] = []
        self._asks: list[pb.ServeAsk] = []
        self._asks_since = 0.0  # when the oldest ask in _asks arrived
        self._grants: set[int] = set()
        # Grants of a lost sidecar -> when it was lost, and its process if known.
        self._held: dict[int, tuple[float, SidecarProcess | None]] = {}
        self._hold_warned: set[SidecarProcess] = set()
        self._grant_hold = grant_hold
        self._now = time.monotonic  # a test may replace it
        self._sidecar_pending = False
        self._poll = poll_interval
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._counts: dict[str, int] = {}  # since take_counts; see COUNTS
        self.client = EngineClient(socket, register, on_ask=self._on_ask, on_release=self._on_release,
                                   on_lost=self._on_lost, on_attached=self._on_attached,
                                   **dict(client_opts or {}))
        self._worker = threading.Thread(target=self._run, name="kvp2p-step", daemon=True)

    def start(self) -> None:
        self.client.start()
        self._worker.start()

    def close(self) -> None:
        self._closed.set()
        self._wake.set()
        self._worker.join(timeout=2.0)
        self.client.close()

    # -- scheduler side: memory only --------------------------------------

    def new_request(self, req_id: str, params: Mapping[str, Any] | None) -> Roles:
        roles = roles_mod.parse(params)
        with self._mu:
            old = self._reqs.pop(req_id, None)
            self._drop_answers(req_id)
            self._failed.discard(req_id)
            for pending in (self._out.finished, self._out.preempted):
                if req_id in pending:
                    # A finish not sent yet would reach the sidecar after
                    # this registration and undo it; the registration
                    # replaces it.
                    pending.remove(req_id)
            # Every request, with a P2P role or not: the sidecar then knows
            # whether its engine has work, so that it can take an engine
            # that stopped stepping with requests in flight for stopped
            # (engine.step_timeout) and an idle one for idle.
            del old  # the registration replaces it
            r = _Req(roles, _PREEMPTED)
            self._reqs[req_id] = r
            self._register(req_id, r)
        return roles

    def lookup(self, req_id: str, k16: bytes) -> Verdict:
        with self._mu:
            if not self._pass_open:
                self._publish()  # the step's first lookup: a pass boundary
                self._pass_open = True
            r = self._reqs.get(req_id)
            if r is None or r.roles.source is None or req_id in self._failed:
                return Verdict.MISS
            if not self._register(req_id, r):
                return Verdict.MISS
            if r.pd_ready:
                return Verdict.HIT  # PD decode side: every block is at the prefiller
            v = self._verdicts.get(req_id, {}).get(k16)
            if v is not None:
                return v
            if k16 not in self._incoming.get(req_id, ()):  # else answered, published at the step's end
                self._asking.setdefault(req_id, {})[k16] = None
            return Verdict.RETRY

    def submit_load(self, job_id: int, req_id: str, keys: Sequence[bytes], chunks: Sequence[int]) -> None:
        with self._mu:
            r = self._reqs.get(req_id)
            if r is None or r.roles.source is None:
                self._done.append(Done(job_id, Kind.LOAD, False, reason="request has no source role"))
                return
            if not keys:
                self._done.append(Done(job_id, Kind.LOAD, True))
                return
            if req_id in self._failed or not self._register(req_id, r):
                self._failed.add(req_id)
                self._done.append(Done(job_id, Kind.LOAD, False, reason="request failed over to local prefill"))
                return
            self._jobs[job_id + 1] = _Job(req_id, Kind.LOAD)
            self._out.loads.append(pb.Job(job_id=job_id + 1, req_id=req_id, keys=keys, chunk_ids=chunks))

    def submit_store(self, job_id: int, req_id: str, keys: Sequence[bytes], chunks: Sequence[int]) -> None:
        with self._mu:
            r = self._reqs.get(req_id)
            if r is None or r.roles.dest is None or not keys:
                # Not a remote-decode request: the block is in the region,
                # where peers' lookups find it (ServeAsk); nothing to send.
                self._done.append(Done(job_id, Kind.STORE, True))
                return
            if not r.roles.dest.kv_request_id:
                self._done.append(Done(job_id, Kind.STORE, False, reason="remote_decoder without kv_request_id"))
                return
            if not self._register(req_id, r):
                self._done.append(Done(job_id, Kind.STORE, False, reason="sidecar lost"))
                return
            self._jobs[job_id + 1] = _Job(req_id, Kind.STORE)
            self._out.stores.append(pb.Job(job_id=job_id + 1, req_id=req_id, keys=keys, chunk_ids=chunks))

    def request_finished(self, req_id: str) -> None:
        with self._mu:
            self._forget(req_id)

    def schedule_end(self, preempted: Collection[str] = ()) -> None:
        with self._mu:
            for req_id in preempted:
                r = self._reqs.get(req_id)
                if r is not None and r.gen == self._gen:
                    self._out.preempted.append(req_id)
                    r.gen = _PREEMPTED
                    self._drop_answers(req_id)
            # Every lookup of the step is done: the answers filed meanwhile
            # are seen whole by the next step's passes.
            self._publish()
            self._pass_open = False
            self._out.end_step = True
        self._wake.set()

    @property
    def generation(self) -> int:
        """Bumped each time the sidecar is lost."""
        return self._gen

    def take_finished(self) -> list[Done]:
        with self._mu:
            d, self._done = self._done, []
        return d

    def take_asks(self) -> list[pb.ServeAsk]:
        with self._mu:
            a, self._asks = self._asks, []
            since = self._asks_since
        if a and (waited := self._now() - since) > ASK_WAIT_WARN_S:
            # Peers' asks are served only at this engine's scheduler steps
            # (vLLM 0.32 has no tier-poll thread); the sidecar answers MISS
            # for them after its engine.serve_timeout. Say when it happened.
            log.warning("kvp2p: a peer's lookup waited %.1fs for this engine's scheduler step; the sidecar "
                        "answers MISS after its engine.serve_timeout", waited)
        return a

    def grant(self, ask_id: int, pin_job_id: int | None, keys: Sequence[bytes], chunks: Sequence[int]) -> None:
        """Answers an ask. pin_job_id is the store job vLLM made to pin the
        chunks (None when nothing was pinned); it is reported done when the
        sidecar releases it."""
        pin = 0 if pin_job_id is None else pin_job_id + 1
        with self._mu:
            if pin:
                self._grants.add(pin)
            self._count("served_chunks", len(chunks))
        ok = self.client.grant(pb.ServeGrant(ask_id=ask_id, pin_id=pin, keys=keys, chunk_ids=chunks))
        if not ok and pin:
            self._on_release([pin])

    def take_counts(self) -> dict[str, int]:
        """The COUNTS since the last call (non-zero ones), and resets them."""
        with self._mu:
            c, self._counts = self._counts, {}
        return c

    def _count(self, name: str, n: int = 1) -> None:
        """Lock held."""
        self._counts[name] = self._counts.get(name, 0) + n

    def has_pending_work(self) -> bool:
        with self._mu:
            return bool(self._jobs or self._asking or self._incoming or self._incoming_pd or self._asks
                        or self._grants or self._held or self._done or not self._out.empty()
                        or self._sidecar_pending)

    def drain(self, warn_after: float = 5.0) -> None:
        """Blocks until no load, store or grant is in flight (vLLM's drain_jobs)."""
        start = time.monotonic()
        warned = False
        self._wake.set()
        with self._cv:
            while self._jobs or self._grants or self._held:
                self._cv.wait(0.05)
                self._release_held(attached=False)
                if not warned and time.monotonic() - start > warn_after:
                    log.warning("kvp2p: drain_jobs still waiting after %.0fs: %d jobs, %d grants",
                                warn_after, len(self._jobs), len(self._grants))
                    warned = True

    # -- state helpers (lock held) ----------------------------------------

    def _register(self, req_id: str, r: _Req) -> bool:
        """Makes sure the sidecar knows the request; False if it cannot."""
        if r.gen == self._gen:
            return True
        if r.gen == _LOST:
            return False
        if req_id in self._out.preempted:
            # Scheduled again before the preemption was sent: the sidecar
            # never hears of it and keeps the request as it was.
            self._out.preempted.remove(req_id)
            r.gen = self._gen
            return True
        self._out.new_requests.append(pb.NewRequest(req_id=req_id, params=r.roles.to_pb()))
        r.gen = self._gen
        return True

    def _forget(self, req_id: str) -> None:
        r = self._reqs.pop(req_id, None)
        if r is not None and r.gen == self._gen:
            self._out.finished.append(req_id)
        self._drop_answers(req_id)
        self._failed.discard(req_id)

    def _fail_req(self, req_id: str) -> None:
        r = self._reqs.get(req_id)
        if r is not None and r.roles.source is not None:
            self._failed.add(req_id)
        self._drop_answers(req_id)

    def _drop_answers(self, req_id: str) -> None:
        """Forgets what is known and asked of req_id's blocks."""
        self._verdicts.pop(req_id, None)
        self._incoming.pop(req_id, None)
        self._incoming_pd.discard(req_id)
        self._asking.pop(req_id, None)

    def _publish(self) -> None:
        """Makes the answers filed since the last call visible to lookups,
        all at once. Called by the scheduler thread at a pass boundary only."""
        if not self._incoming and not self._incoming_pd:
            return
        for req_id, got in self._incoming.items():
            if req_id in self._reqs and req_id not in self._failed:
                self._verdicts.setdefault(req_id, {}).update(got)
        for req_id in self._incoming_pd:
            r = self._reqs.get(req_id)
            if r is not None and req_id not in self._failed:
                r.pd_ready = True
        self._incoming.clear()
        self._incoming_pd.clear()

    def _fail_job(self, api_id: int, reason: str) -> None:
        j = self._jobs.pop(api_id, None)
        if j is None:
            return
        self._done.append(Done(api_id - 1, j.kind, False, reason=reason))
        if j.kind == Kind.LOAD:
            self._fail_req(j.req_id)

    # -- client callbacks ---------------------------------------------------

    def _on_ask(self, ask: pb.ServeAsk) -> None:
        with self._mu:
            if not self._asks:
                self._asks_since = self._now()
            self._asks.append(ask)

    def _on_release(self, pins: Sequence[int]) -> None:
        with self._cv:
            for pin in pins:
                if pin in self._grants:
                    self._grants.discard(pin)
                    self._done.append(Done(pin - 1, Kind.PIN, True))
            self._cv.notify_all()

    def _on_lost(self, why: str) -> None:
        with self._cv:
            self._count("sidecar_lost")
            self._gen += 1
            for api_id in list(self._jobs):
                self._fail_job(api_id, f"sidecar lost: {why}")
            for req_id, r in self._reqs.items():
                r.gen = _LOST
                if r.roles.source is not None:
                    self._failed.add(req_id)
            self._verdicts.clear()
            self._incoming.clear()
            self._incoming_pd.clear()
            self._asking.clear()
            self._out = _Out()
            self._asks.clear()
            now = self._now()
            proc = self.client.sidecar
            for pin in self._grants:
                self._held[pin] = (now, proc)
            self._grants.clear()
            self._sidecar_pending = False
            self._cv.notify_all()

    def _on_attached(self, _registered: pb.Registered) -> None:
        with self._cv:
            self._release_held(attached=True)
            self._cv.notify_all()

    def _release_held(self, *, attached: bool) -> None:
        """Gives a lost sidecar's grants back to vLLM once the sidecar has
        registered again (it refuses a registration while any old chunk is in
        use) or its process has exited. When its process is unknown (no step
        socket: a sidecar over TCP), after `grant_hold` instead. Lock held."""
        if not self._held:
            return
        now = self._now()
        gone: dict[SidecarProcess, bool] = {}
        for pin, (lost_at, proc) in list(self._held.items()):
            if proc is None:
                free = now - lost_at >= self._grant_hold
            else:
                if proc not in gone:
                    gone[proc] = proc.gone()
                free = gone[proc]
                if not free and now - lost_at >= self._grant_hold and proc not in self._hold_warned:
                    self._hold_warned.add(proc)
                    log.warning("kvp2p: sidecar (pid %d) lost %.0fs ago but alive (frozen?): holding the chunks "
                                "it may still send to peers until it registers again or exits",
                                proc.pid, now - lost_at)
            if attached or free:
                del self._held[pin]
                self._done.append(Done(pin - 1, Kind.PIN, True))
        if not self._held:
            self._hold_warned.clear()

    # -- worker -------------------------------------------------------------

    def _take(self) -> tuple[pb.StepRequest, int, dict[str, list[bytes]]] | None:
        """The next Step: the queued work, within the sidecar's limits (what
        does not fit waits for the next Step, in order)."""
        with self._mu:
            out = self._out
            if not self._asking and not self._jobs and (out.empty() or _Out(end_step=out.end_step) == out):
                # Nothing to say: a step's end matters only to lookups.
                self._out = _Out()
                return None
            reg = self.client.registered
            keys_left = (reg.max_keys_per_step if reg and reg.max_keys_per_step else 65536)
            jobs_left = (reg.max_jobs_in_flight if reg and reg.max_jobs_in_flight else 4096)
            jobs_left -= sum(1 for j in self._jobs.values() if j.sent)
            items_left = _MAX_ITEMS
            rest = _Out()
            send = _Out(end_step=out.end_step)
            n = min(len(out.new_requests), items_left)
            send.new_requests, rest.new_requests = out.new_requests[:n], out.new_requests[n:]
            items_left -= n
            for what in ("loads", "stores"):
                src: list[pb.Job] = getattr(out, what)
                budget = reg.max_keys_per_step if reg and reg.max_keys_per_step else 65536
                for j in [j for j in src if len(j.keys) > budget]:
                    self._fail_job(j.job_id, f"{len(j.keys)} keys in one job, the sidecar takes {budget} a step")
                src = [j for j in src if len(j.keys) <= budget]
                i = 0
                while (i < len(src) and not rest.new_requests and len(src[i].keys) <= keys_left
                       and items_left > 0 and jobs_left > 0):
                    keys_left -= len(src[i].keys)
                    items_left -= 1
                    jobs_left -= 1
                    self._jobs[src[i].job_id].sent = True
                    i += 1
                getattr(send, what).extend(src[:i])
                getattr(rest, what).extend(src[i:])
            # The sidecar applies a step's finishes and preemptions before
            # its registrations and jobs (engine.proto's StepRequest), so an
            # end must not ride with its request's registration or jobs: it
            # would forget the request first, and a store would serve no
            # one. Such ends go in the next step; while any work waits for
            # a later step, every end waits with it (nothing overtakes).
            held = bool(rest.new_requests or rest.loads or rest.stores)
            busy = {n.req_id for n in send.new_requests}
            busy.update(j.req_id for j in send.loads)
            busy.update(j.req_id for j in send.stores)
            for what in ("finished", "preempted"):
                ids: list[str] = getattr(out, what)
                getattr(send, what).extend(i for i in ids if not held and i not in busy)
                getattr(rest, what).extend(i for i in ids if held or i in busy)
            if held:
                rest.end_step = out.end_step
            asked: dict[str, list[bytes]] = {}
            for rid, ks in self._asking.items():
                if not ks or items_left <= 0 or keys_left <= 0:
                    continue
                r = self._reqs.get(rid)
                if r is None or r.gen != self._gen or any(nr.req_id == rid for nr in rest.new_requests):
                    continue
                asked[rid] = list(ks)[:keys_left]
                keys_left -= len(asked[rid])
                items_left -= 1
            self._out = rest
            gen = self._gen
        req = pb.StepRequest(
            new_requests=send.new_requests,
            # keys_packed: one field per batch, not one per key (about half
            # of a 1024-key step's encoding cost).
            lookups=[pb.LookupBatch(req_id=rid, keys_packed=b"".join(keys), packed_verdicts=True)
                     for rid, keys in asked.items()],
            loads=send.loads, stores=send.stores, finished=send.finished, preempted=send.preempted,
            end_step=send.end_step,
        )
        if not rest.empty():
            self._wake.set()  # the rest goes at once
        return req, gen, asked

    def _apply(self, resp: pb.StepResponse, gen: int, asked: dict[str, list[bytes]]) -> None:
        with self._cv:
            if gen != self._gen:
                return  # answers of a lost registration
            self._count("steps")
            for a in resp.lookups:
                keys = asked.get(a.req_id)
                if keys is None or a.req_id not in self._reqs or a.req_id in self._failed:
                    continue
                open_ = self._asking.get(a.req_id)
                # Filed, not published: the scheduler thread publishes at a
                # pass boundary (_publish).
                got: dict[bytes, Verdict] = {}
                r = self._reqs[a.req_id]
                # verdicts_packed (one byte each: what the batch asked for)
                # decodes ten times faster than the repeated enum.
                for k, v in zip(keys, a.verdicts_packed or a.verdicts):
                    if v == pb.VERDICT_HIT and r.roles.source is not None and r.roles.source.pd:
                        self._incoming_pd.add(a.req_id)
                    if v in (pb.VERDICT_HIT, pb.VERDICT_MISS):
                        got[k] = Verdict(v)
                        if open_ is not None:
                            open_.pop(k, None)
                if got:
                    self._incoming.setdefault(a.req_id, {}).update(got)
                if open_ is not None and not open_:
                    del self._asking[a.req_id]
            for d in resp.finished:
                j = self._jobs.pop(d.job_id, None)
                if j is None:
                    continue
                partial = list(d.successful) if not d.success and d.successful else None
                self._done.append(Done(d.job_id - 1, j.kind, d.success, partial,
                                       d.transfer_us / 1e6, d.bytes, d.reason))
            for req_id in resp.failed_requests:
                self._fail_req(req_id)
            self._sidecar_pending = resp.pending_work
            self._cv.notify_all()

    def _fail_step(self, req: pb.StepRequest, gen: int, why: str, kind: str) -> None:
        with self._cv:
            self._count(f"step_failures_{kind}")
            for nr in req.new_requests:
                r = self._reqs.get(nr.req_id)
                if r is not None and r.gen == gen:
                    r.gen = _LOST
                    self._fail_req(nr.req_id)
            for b in req.lookups:
                self._fail_req(b.req_id)
            for j in list(req.loads) + list(req.stores):
                self._fail_job(j.job_id, why)
            self._cv.notify_all()

    def _run(self) -> None:
        while not self._closed.is_set():
            with self._mu:
                busy = bool(self._jobs or self._asking)
                self._release_held(attached=False)
            self._wake.wait(self._poll if busy else 0.1)
            self._wake.clear()
            if self._closed.is_set():
                return
            taken = self._take()
            if taken is None:
                continue
            req, gen, asked = taken
            try:
                resp = self.client.step(req)
            except SidecarUnavailable as e:
                self._fail_step(req, gen, f"sidecar unavailable: {e}", "unavailable")
                continue
            except StepRefused as e:
                log.error("kvp2p: sidecar refused a step (%s); its jobs fail, its requests fall back", e)
                self._fail_step(req, gen, str(e), "refused")
                continue
            except Exception as e:  # noqa: BLE001 - never let the worker die
                log.exception("kvp2p: step failed")
                self._fail_step(req, gen, f"step failed: {e}", "error")
                continue
            self._apply(resp, gen, asked)


def ids(items: Iterable[int]) -> list[int]:
    """Plain ints from numpy or Python ints (chunk ids)."""
    return [int(i) for i in items]
