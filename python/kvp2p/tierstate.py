"""The tier's decisions, without threads, locks, clocks or sockets.

TierState is one engine's side of the engine API between Steps: which
requests the sidecar knows, what their lookups answer, which jobs are in
flight, which chunks peers were lent, and what the next Step says. It is
stepped: the scheduler's hooks call it (lookup, submit_*, schedule_end,
...), the worker takes a Step from it (next_step) and files the answer
(apply, or step_failed), and the client's news comes in as calls too
(ask_arrived, released, lost, attached). Times are arguments. It is not
thread-safe; TierCore (kvp2p.tier) serializes the calls and does the I/O,
as the Go node's loop does around loads.Table.

Answers reach lookups only between lookup passes. vLLM looks a request's
blocks up one by one (a pass) and promotes the HITs it saw as one load
job per request and step; a pass that saw some blocks HIT and the rest
RETRY (the answers landed in the middle of it) would promote them as two
jobs in two steps. So `apply` files the sidecar's verdicts in a pending
buffer (_incoming), and they are published at a pass boundary: the step's
end (schedule_end, after every lookup of the step) and the first lookup of
a step. Within a step the verdicts a lookup reads do not change, except to
MISS: a request that fell back answers MISS at once (its jobs fail at once
too, so nothing is gained by waiting).

Ids. vLLM numbers jobs from 0; the API reserves 0, so a job's id on the API
is vLLM's plus one (pin ids too: a grant names the store job vLLM made for
it, plus one).

Fallback. A request whose load failed, or that was registered with a
sidecar since lost, is in the failed set (_fall_back): it answers MISS
from then on (vLLM prefills it locally) and its new jobs fail at once.
When the sidecar is lost every job in flight fails (the sidecar revokes
the region as soon as it learns the stream is gone, so no late peer write
reaches a chunk vLLM reuses). Chunks lent to peers are held longer (see
kvp2p.lent).

Finding a source (docs/find.md). A request that names none asks the
peers' summaries (kvp2p.summaries, in memory) at its first lookup, i.e. at
the first key the CPU tier does not hold. No peer probably holds it: MISS
at once. Otherwise the lookup answers RETRY, so that vLLM goes on looking
the request's next keys up in the same pass, and each next key narrows the
candidates to the peers that probably hold it too; the request is then
registered with the winner as remote_kv_source and its keys seen so far
are asked, as a named source's are. The winner: a peer that holds at least
MIN_RUN keys in a row, the longest run, then the fewest of this engine's
requests loading from it. A run shorter than MIN_RUN that ends before the
request does (its next key has no candidate) answers MISS, and the request
answers MISS at once from then on. When the pass ends (schedule_end) still
finding, the request's keys ran out or vLLM cut the pass short (its token
budget): the tier cannot tell which, so a run of END_RUN keys is enough
there (two keys in a row in some peer's summary are a false positive for
about 3 requests in 10^7 against 1,000 full peers: docs/find.md), and a
single key is no source: one key's false positive among 1,000 peers is
about 1.6%, and one block costs less to compute than a wrong round trip to
a peer (which, wrong, costs a step or more); in the middle of a request,
MIN_RUN keys are asked for the same reason. vLLM's tier API shows a tier
one key per lookup, so the run is learnt while vLLM scans: a request whose
first key tests present in some summary (a false positive, about 1.6% of
requests against 1,000 full peers' summaries: docs/find.md) waits one
step for nothing.

What the engine holds. Every submit_store's keys and chunks, and every
load that succeeded, are reported in the next Step's `stored` (unless the
sidecar said find is off, set_find), so that the sidecar's summary of this
engine's CPU tier is what peers find.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from kvp2p import roles as roles_mod
from kvp2p._pb import engine_pb2 as pb
from kvp2p.client import SidecarProcess
from kvp2p.lent import Lent
from kvp2p.outbox import Budget, Outbox, pack
from kvp2p.roles import Roles, Source
from kvp2p.summaries import SummaryMirror


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


@dataclass(frozen=True, slots=True)
class Step:
    """One Step for the worker to send, and what its answer is filed against."""

    request: pb.StepRequest
    gen: int  # the generation it was taken in: an answer of an older one is dropped
    asked: dict[str, list[bytes]]  # the lookups it carries, per request, in order
    more: bool  # work left over for the next Step, which should go at once


# What TierState counts (take_counts): Steps answered; failed ones by kind
# (the sidecar unavailable, a step refused, any other error); sidecars lost;
# chunks the engine pinned for peers.
COUNTS = ("steps", "step_failures_unavailable", "step_failures_refused", "step_failures_error",
          "sidecar_lost", "served_chunks", "found_sources")

# A peer is found for a request only when its summary holds this many keys
# in a row: one key's false positive among 1,000 peers is a few percent,
# three in a row in one peer's summary never seen (docs/find.md).
MIN_RUN = 3
# ... or this many when the pass ends on them (the request's last keys, or
# a pass vLLM cut short): two in a row in one peer's summary are a false
# positive about (1.8e-5)^2 of the time, where a run that ends short of the
# request has MIN_RUN to prove itself.
END_RUN = 2

_PREEMPTED = -2  # registered before, forgotten by the sidecar: register again on use
_LOST = -1  # registered with a sidecar since lost: fall back for good


@dataclass(slots=True)
class _Req:
    roles: Roles
    gen: int  # the generation it is registered under, or _PREEMPTED / _LOST
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
    keys: Sequence[bytes] = ()  # a load's keys and chunks: reported stored on success
    chunks: Sequence[int] = ()


@dataclass(slots=True)
class _Finding:
    """A request naming no source, while its pass learns who holds it."""

    keys: list[bytes]  # its keys looked up so far in the pass, in order
    cands: list[str]  # the peers whose summaries hold all of them


class TierState:
    """One engine's side of the engine API, batched per scheduler step."""

    def __init__(self, *, grant_hold: float = 5.0, mirror: SummaryMirror | None = None) -> None:
        """`mirror` holds the peers' summaries a request naming no source
        is found a source in (default: an empty one: nothing is found)."""
        self._mirror = mirror if mirror is not None else SummaryMirror()
        self._finding: dict[str, _Finding] = {}  # requests whose pass is finding a source
        self._no_source: set[str] = set()  # requests found none: MISS at once
        self._report = True  # report stores in Step.stored (set_find)
        self._stored_keys: list[bytes] = []
        self._stored_chunks: list[int] = []
        self._gen = 0  # bumped when the sidecar is lost
        self._reqs: dict[str, _Req] = {}
        # Engine request ids that fell back: lookups MISS, loads fail (_fall_back).
        self._failed: set[str] = set()
        self._verdicts: dict[str, dict[bytes, Verdict]] = {}  # what lookups read
        self._incoming: dict[str, dict[bytes, Verdict]] = {}  # filed, not yet published
        self._incoming_pd: set[str] = set()  # PD requests the sidecar answered HIT
        self._pass_open = False  # a step's lookups began: nothing is published until its end
        self._asking: dict[str, dict[bytes, None]] = {}  # ordered sets
        self._jobs: dict[int, _Job] = {}  # API job id -> job
        self._out = Outbox()
        self._done: list[Done] = []
        self._asks: list[pb.ServeAsk] = []
        self._asks_since = 0.0  # when the oldest ask in _asks arrived
        self._lent = Lent(grant_hold)
        self._sidecar_pending = False
        self._counts: dict[str, int] = {}  # since take_counts; see COUNTS

    # -- the scheduler's hooks ----------------------------------------------

    def new_request(self, req_id: str, params: Mapping[str, Any] | None) -> Roles:
        roles = roles_mod.parse(params)
        old = self._reqs.pop(req_id, None)
        self._drop_answers(req_id)
        self._finding.pop(req_id, None)
        self._no_source.discard(req_id)
        self._failed.discard(req_id)
        for pending in (self._out.finished, self._out.preempted):
            if req_id in pending:
                # A finish not sent yet would reach the sidecar after this
                # registration and undo it; the registration replaces it.
                pending.remove(req_id)
        # Every request, with a P2P role or not: the sidecar then knows
        # whether its engine has work, so that it can take an engine that
        # stopped stepping with requests in flight for stopped
        # (engine.step_timeout) and an idle one for idle.
        del old  # the registration replaces it
        r = _Req(roles, _PREEMPTED)
        self._reqs[req_id] = r
        self._register(req_id, r)
        return roles

    def lookup(self, req_id: str, k16: bytes) -> Verdict:
        if not self._pass_open:
            self._publish()  # the step's first lookup: a pass boundary
            self._pass_open = True
        r = self._reqs.get(req_id)
        if r is None or r.roles.source is None:
            return self._lookup_unnamed(req_id, k16)
        return self._lookup_source(req_id, r, k16)

    def _lookup_unnamed(self, req_id: str, k16: bytes) -> Verdict:
        """A request that names no source: one is found in the peers'
        summaries (see "Finding a source" above), or MISS. A remote_decoder
        request (producing for a decoder) finds none."""
        if not len(self._mirror) or req_id in self._no_source:
            return Verdict.MISS
        r = self._reqs.get(req_id)
        if r is not None and r.roles.dest is not None:
            return Verdict.MISS
        f = self._finding.get(req_id)
        if f is None:
            cands = self._mirror.holders(k16)
            if not cands:
                return Verdict.MISS
            self._finding[req_id] = _Finding([k16], cands)
            return Verdict.RETRY
        still = [p for p in f.cands if self._mirror.holds(p, k16)]
        if not still:
            if len(f.keys) >= MIN_RUN:
                return self._found(req_id, f, k16)
            del self._finding[req_id]
            self._no_source.add(req_id)
            return Verdict.MISS
        f.keys.append(k16)
        f.cands = still
        if len(still) == 1 and len(f.keys) >= MIN_RUN:
            return self._found(req_id, f, None)
        return Verdict.RETRY

    def _found(self, req_id: str, f: _Finding, k16: bytes | None) -> Verdict:
        """Registers req_id with the best of f's candidates as its
        remote_kv_source, asks the keys its pass saw, and answers k16 (the
        key being looked up, if not among them) as for a named source."""
        del self._finding[req_id]
        peer = min(f.cands, key=lambda p: (self._loading_from(p), p))
        src = source_of(peer, req_id)
        if src is None:
            self._no_source.add(req_id)
            return Verdict.MISS
        # Registered again, now with its source: the sidecar's registration
        # of a request id replaces the one before (new_request).
        r = _Req(Roles(src, None), _PREEMPTED)
        self._reqs[req_id] = r
        self._register(req_id, r)
        self._count("found_sources")
        asking = self._asking.setdefault(req_id, {})
        for k in f.keys:
            asking[k] = None
        return self._lookup_source(req_id, r, k16) if k16 is not None else Verdict.RETRY

    def _loading_from(self, peer: str) -> int:
        """This engine's live requests that load from peer."""
        n = 0
        for r in self._reqs.values():
            s = r.roles.source
            if s is not None and r.gen == self._gen and peer_id(s.host, s.port) == peer:
                n += 1
        return n

    def _lookup_source(self, req_id: str, r: _Req, k16: bytes) -> Verdict:
        """A request whose source names the peer: what the sidecar said of
        k16, or RETRY while it is asked."""
        if req_id in self._failed or not self._register(req_id, r):
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
        self._jobs[job_id + 1] = _Job(req_id, Kind.LOAD, keys=keys, chunks=chunks)
        self._out.loads.append(pb.Job(job_id=job_id + 1, req_id=req_id, keys=keys, chunk_ids=chunks))

    def submit_store(self, job_id: int, req_id: str, keys: Sequence[bytes], chunks: Sequence[int]) -> None:
        if self._report:
            # The CPU tier holds keys in chunks now: peers' summaries say so.
            self._stored_keys.extend(keys)
            self._stored_chunks.extend(chunks)
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
        r = self._reqs.pop(req_id, None)
        if r is not None and r.gen == self._gen:
            self._out.finished.append(req_id)
        self._drop_answers(req_id)
        self._failed.discard(req_id)
        self._finding.pop(req_id, None)
        self._no_source.discard(req_id)

    def schedule_end(self, preempted: Collection[str] = ()) -> None:
        for req_id in preempted:
            r = self._reqs.get(req_id)
            if r is not None and r.gen == self._gen:
                self._out.preempted.append(req_id)
                r.gen = _PREEMPTED
                self._drop_answers(req_id)
        # A pass that ended still finding: the request's keys ran out, or
        # vLLM cut the pass short. With a run of END_RUN keys or more its
        # best candidate is its source; with fewer, none is (see "Finding
        # a source" above).
        for req_id, f in list(self._finding.items()):
            if len(f.keys) >= END_RUN:
                self._found(req_id, f, None)
            else:
                del self._finding[req_id]
                self._no_source.add(req_id)
        # Every lookup of the step is done: the answers filed meanwhile are
        # seen whole by the next step's passes.
        self._publish()
        self._pass_open = False
        self._out.end_step = True

    def set_find(self, enabled: bool) -> None:
        """Whether the sidecar summarises this engine (find enabled): stores
        are reported only then."""
        self._report = enabled
        if not enabled:
            self._stored_keys, self._stored_chunks = [], []

    @property
    def mirror(self) -> SummaryMirror:
        """The peers' summaries sources are found in."""
        return self._mirror

    @property
    def generation(self) -> int:
        """Bumped each time the sidecar is lost."""
        return self._gen

    def take_finished(self) -> list[Done]:
        d, self._done = self._done, []
        return d

    def take_asks(self, now: float) -> tuple[list[pb.ServeAsk], float]:
        """Peers' asks since the last call, and how long the oldest waited."""
        a, self._asks = self._asks, []
        return a, (now - self._asks_since if a else 0.0)

    def granted(self, pin: int, chunks: int) -> None:
        """`chunks` chunks were lent to a peer under API pin id `pin` (0:
        none pinned); it is reported done when the sidecar releases it."""
        if pin:
            self._lent.lend(pin)
        self._count("served_chunks", chunks)

    def take_counts(self) -> dict[str, int]:
        """The COUNTS since the last call (non-zero ones), and resets them."""
        c, self._counts = self._counts, {}
        return c

    def has_pending_work(self) -> bool:
        return bool(self._jobs or self._asking or self._incoming or self._incoming_pd or self._asks
                    or self._lent.lent() or self._lent.held() or self._done or self._out.has_work() or self._out.end_step
                    or self._sidecar_pending)

    def in_flight(self) -> tuple[int, int]:
        """Jobs in flight, and pins lent to peers not given back yet (a
        lost sidecar's held ones included): what vLLM's drain waits for."""
        return len(self._jobs), self._lent.lent() + self._lent.held()

    def lent(self) -> int:
        """Pins lent to the attached sidecar's peers, not released yet."""
        return self._lent.lent()

    def awaits_sidecar(self) -> bool:
        """Whether jobs or lookups wait for the sidecar's answer: the worker
        then polls it."""
        return bool(self._jobs or self._asking)

    def holds(self, req_id: str) -> bool:
        """Whether anything of req_id is kept (its registration, answers,
        asks or fallback): False once it finished."""
        return (req_id in self._reqs or req_id in self._failed or req_id in self._verdicts
                or req_id in self._incoming or req_id in self._incoming_pd or req_id in self._asking
                or req_id in self._finding or req_id in self._no_source)

    # -- the client's news ----------------------------------------------------

    def ask_arrived(self, ask: pb.ServeAsk, now: float) -> None:
        if not self._asks:
            self._asks_since = now
        self._asks.append(ask)

    def released(self, pins: Sequence[int]) -> None:
        """The sidecar gave pins back: they are reported done."""
        self._pins_done(self._lent.release(pins))

    def lost(self, why: str, now: float, proc: SidecarProcess | None) -> None:
        """The sidecar (its process `proc`, if known) was lost: every job
        fails, every request falls back, lent chunks are held."""
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
        self._finding.clear()
        self._out = Outbox()
        self._asks.clear()
        self._lent.lose(now, proc)
        self._sidecar_pending = False

    def attached(self) -> None:
        """A sidecar registered us: it refuses that while any chunk a lost
        one was lent is in use, so those are free."""
        self._pins_done(self._lent.attached())

    def held_processes(self) -> set[SidecarProcess]:
        """The processes of lost sidecars whose lent chunks are held."""
        return self._lent.processes()

    def release_held(self, now: float, gone: Collection[SidecarProcess]) -> list[tuple[SidecarProcess, float]]:
        """Gives back the chunks lent through a lost sidecar whose process
        is `gone` (exited), or, its process unknown, `grant_hold` after the
        loss. Returns the processes newly found alive past grant_hold (and
        how long since their loss), to be told once: frozen, most likely."""
        freed, overdue = self._lent.release_held(now, gone)
        self._pins_done(freed)
        return overdue

    # -- the worker's Steps -----------------------------------------------------

    def next_step(self, reg: pb.Registered | None) -> Step | None:
        """The next Step: the queued work, within the limits the sidecar
        stated in `reg` (what does not fit waits for the next Step, in
        order); None when there is nothing to say."""
        if not self._asking and not self._jobs and not self._out.has_work() and not self._stored_chunks:
            self._out = Outbox()  # a step's end matters only to lookups
            return None
        budget = Budget.of(reg, sum(1 for j in self._jobs.values() if j.sent))
        packed = pack(self._out, budget)
        self._out = packed.rest
        for j in packed.oversized:
            self._fail_job(j.job_id, f"{len(j.keys)} keys in one job, the sidecar takes {budget.per_job} a step")
        for j in (*packed.send.loads, *packed.send.stores):
            self._jobs[j.job_id].sent = True
        asked: dict[str, list[bytes]] = {}
        for rid, ks in self._asking.items():
            if not ks or budget.items <= 0 or budget.keys <= 0:
                continue
            r = self._reqs.get(rid)
            if r is None or r.gen != self._gen or packed.waiting_registration(rid):
                continue
            asked[rid] = list(ks)[:budget.keys]
            budget.keys -= len(asked[rid])
            budget.items -= 1
        send = packed.send
        stored = None
        if self._stored_chunks and budget.keys > 0:
            n = min(budget.keys, len(self._stored_chunks))
            stored = pb.StoredBlocks(keys_packed=b"".join(self._stored_keys[:n]), chunk_ids=self._stored_chunks[:n])
            del self._stored_keys[:n], self._stored_chunks[:n]
        req = pb.StepRequest(
            new_requests=send.new_requests,
            # keys_packed: one field per batch, not one per key (about half
            # of a 1024-key step's encoding cost).
            lookups=[pb.LookupBatch(req_id=rid, keys_packed=b"".join(keys), packed_verdicts=True)
                     for rid, keys in asked.items()],
            loads=send.loads, stores=send.stores, finished=send.finished, preempted=send.preempted,
            end_step=send.end_step, stored=stored,
        )
        return Step(req, self._gen, asked, not packed.rest.empty() or bool(self._stored_chunks))

    def apply(self, step: Step, resp: pb.StepResponse) -> None:
        """Files the sidecar's answer to `step`."""
        if step.gen != self._gen:
            return  # answers of a lost registration
        self._count("steps")
        for a in resp.lookups:
            keys = step.asked.get(a.req_id)
            r = self._reqs.get(a.req_id)
            if keys is not None and r is not None and a.req_id not in self._failed:
                self._file_verdicts(a, r, keys)
        for d in resp.finished:
            j = self._jobs.pop(d.job_id, None)
            if j is None:
                continue
            partial = list(d.successful) if not d.success and d.successful else None
            if j.kind == Kind.LOAD and self._report and (d.success or partial):
                # Loaded from a peer: the CPU tier holds these now.
                idx = range(len(j.keys)) if d.success else [i for i in partial or () if i < len(j.keys)]
                self._stored_keys.extend(j.keys[i] for i in idx)
                self._stored_chunks.extend(j.chunks[i] for i in idx)
            self._done.append(Done(d.job_id - 1, j.kind, d.success, partial,
                                   d.transfer_us / 1e6, d.bytes, d.reason))
        for req_id in resp.failed_requests:
            self._fall_back(req_id)
        self._sidecar_pending = resp.pending_work

    def _file_verdicts(self, a: pb.LookupAnswer, r: _Req, keys: list[bytes]) -> None:
        """Files one request's answers, unpublished (see "Answers" above)."""
        open_ = self._asking.get(a.req_id)
        got: dict[bytes, Verdict] = {}
        # verdicts_packed (one byte each: what the batch asked for) decodes
        # ten times faster than the repeated enum.
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

    def step_failed(self, step: Step, why: str, kind: str) -> None:
        """`step` got no answer (`kind`: unavailable, refused or error): its
        new requests and lookups fall back, its jobs fail, and what it
        reported stored is reported again (unless it was refused)."""
        self._count(f"step_failures_{kind}")
        for nr in step.request.new_requests:
            r = self._reqs.get(nr.req_id)
            if r is not None and r.gen == step.gen:
                r.gen = _LOST
                self._fall_back(nr.req_id)
        for b in step.request.lookups:
            self._fall_back(b.req_id)
        for j in (*step.request.loads, *step.request.stores):
            self._fail_job(j.job_id, why)
        st = step.request.stored
        if kind != "refused" and self._report and st.chunk_ids:
            # What the CPU tier holds is still held: reported again, ahead
            # of what was stored since (a chunk stored again since must end
            # with its newer key). Lost, it stayed out of this engine's
            # summary for good, and peers recomputed what they could have
            # loaded from here (seen behind a round-robin proxy when a
            # starved engine's Steps failed). Reporting a chunk twice is
            # harmless; a refused Step's report is not sent again.
            ks = st.keys_packed
            self._stored_keys[:0] = [ks[i * 16:(i + 1) * 16] for i in range(len(st.chunk_ids))]
            self._stored_chunks[:0] = list(st.chunk_ids)

    # -- helpers --------------------------------------------------------------

    def _pins_done(self, pins: list[int]) -> None:
        self._done.extend(Done(pin - 1, Kind.PIN, True) for pin in pins)

    def _count(self, name: str, n: int = 1) -> None:
        self._counts[name] = self._counts.get(name, 0) + n

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

    def _fall_back(self, req_id: str) -> None:
        """The engine's side of a fallback: req_id (a request with a source)
        joins the failed set, so its lookups answer MISS and vLLM prefills
        it locally; what was known of its blocks is dropped."""
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
        all at once. Called at a pass boundary only."""
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
            self._fall_back(j.req_id)


def peer_id(host: str, port: int) -> str:
    """A peer's id (host:port), as the sidecar names it."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def source_of(peer: str, req_id: str) -> Source | None:
    """The remote_kv_source role naming `peer` (host:port) for req_id;
    None if peer is not host:port."""
    host, sep, port = peer.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return Source(req_id, host, int(port), "", False)
