"""The work a tier queues between Steps, and how much of it one Step takes.

Pure: no lock, no thread, no I/O. TierState owns an Outbox and calls
`pack` when its worker asks for the next Step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvp2p._pb import engine_pb2 as pb

# Items (requests, batches, jobs, ids) in one Step: well under the
# sidecar's limit (16384 by default; Registered does not state it).
MAX_ITEMS = 4096
# The sidecar's limits when Registered does not state them.
DEFAULT_KEYS_PER_STEP = 65536
DEFAULT_JOBS_IN_FLIGHT = 4096


@dataclass(slots=True)
class Outbox:
    """What the next Steps must tell the sidecar, in the order it was queued."""

    new_requests: list[pb.NewRequest] = field(default_factory=list)
    loads: list[pb.Job] = field(default_factory=list)
    stores: list[pb.Job] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    end_step: bool = False

    def has_work(self) -> bool:
        """Whether anything but the step's end is queued."""
        return bool(self.new_requests or self.loads or self.stores or self.finished or self.preempted)

    def empty(self) -> bool:
        return not (self.has_work() or self.end_step)


@dataclass(slots=True)
class Budget:
    """What one Step may still carry; `pack` and the lookups spend it."""

    keys: int  # keys in the step (jobs' and lookups')
    jobs: int  # jobs the sidecar may still have in flight
    items: int = MAX_ITEMS
    per_job: int = DEFAULT_KEYS_PER_STEP  # the keys one job may have at all

    @classmethod
    def of(cls, reg: pb.Registered | None, jobs_sent: int) -> "Budget":
        """The limits the sidecar stated when it registered us (or its
        defaults), less the `jobs_sent` still in flight."""
        keys = reg.max_keys_per_step if reg is not None and reg.max_keys_per_step else DEFAULT_KEYS_PER_STEP
        jobs = reg.max_jobs_in_flight if reg is not None and reg.max_jobs_in_flight else DEFAULT_JOBS_IN_FLIGHT
        return cls(keys=keys, jobs=jobs - jobs_sent, per_job=keys)


@dataclass(slots=True)
class Packed:
    send: Outbox  # this Step's part
    rest: Outbox  # waits for the next Step, in order
    oversized: list[pb.Job]  # jobs no Step can carry: they fail

    def waiting_registration(self, req_id: str) -> bool:
        """Whether req_id's registration waits for a later Step."""
        return any(n.req_id == req_id for n in self.rest.new_requests)


def pack(out: Outbox, budget: Budget) -> Packed:
    """Splits `out` into what one Step carries within `budget` (spending
    it) and what waits. What does not fit waits, in order, and nothing
    overtakes it."""
    send = Outbox(end_step=out.end_step)
    rest = Outbox()
    n = min(len(out.new_requests), budget.items)
    send.new_requests, rest.new_requests = out.new_requests[:n], out.new_requests[n:]
    budget.items -= n
    oversized: list[pb.Job] = []
    for src, sent, kept in ((out.loads, send.loads, rest.loads), (out.stores, send.stores, rest.stores)):
        fits = [j for j in src if len(j.keys) <= budget.per_job]
        oversized += [j for j in src if len(j.keys) > budget.per_job]
        i = 0
        while (i < len(fits) and not rest.new_requests and len(fits[i].keys) <= budget.keys
               and budget.items > 0 and budget.jobs > 0):
            budget.keys -= len(fits[i].keys)
            budget.items -= 1
            budget.jobs -= 1
            i += 1
        sent.extend(fits[:i])
        kept.extend(fits[i:])
    # The sidecar applies a step's finishes and preemptions before its
    # registrations and jobs (engine.proto's StepRequest), so an end must
    # not ride with its request's registration or jobs: it would forget
    # the request first, and a store would serve no one. Such ends go in
    # the next step; while any work waits for a later step, every end
    # waits with it (nothing overtakes).
    held = bool(rest.new_requests or rest.loads or rest.stores)
    busy = {n.req_id for n in send.new_requests}
    busy.update(j.req_id for j in send.loads)
    busy.update(j.req_id for j in send.stores)
    for ids, sent_ids, kept_ids in ((out.finished, send.finished, rest.finished),
                                    (out.preempted, send.preempted, rest.preempted)):
        sent_ids.extend(i for i in ids if not held and i not in busy)
        kept_ids.extend(i for i in ids if held or i in busy)
    if held:
        rest.end_step = out.end_step
    return Packed(send, rest, oversized)
