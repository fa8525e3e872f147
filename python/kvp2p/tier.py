"""The tier as vLLM's plugin (kvp2p.vllm) and the tests drive it: a
TierState (kvp2p.tierstate, which decides) behind one lock, and the
threads that do its I/O.

Threads. vLLM calls the hooks (lookup, submit_*, schedule_end, ...) from
its scheduler thread or its tier-poll thread, never two at once. Those
hooks only touch the state: they queue the step's work and read answers
already in. A worker thread takes the queued work from the state as one
Step per scheduler step (and polls the sidecar every `poll_interval` while
jobs or lookups are open), sends it, and files the answer. The client's
threads deliver asks, releases and the sidecar's loss. The lock guards the
state; nothing holds it across a call to the sidecar, a read of /proc or
a log line. A lock and not a queue to the worker: a lookup is answered at
once, from the scheduler's thread, however long a Step takes.

The peers' summaries (kvp2p.summaries), which a request naming no source
is found a source in, are fed by a thread of their own (kvp2p.watch)
without the lock; the worker moves their clock each turn.

Chunks lent through a lost sidecar are held until it registers again or
its process has exited (kvp2p.lent): the step socket names the process
(SidecarProcess), and the worker asks /proc each turn (tick).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from kvp2p._pb import engine_pb2 as pb
from kvp2p.client import EngineClient, SidecarUnavailable, StepRefused
from kvp2p.roles import Roles
from kvp2p.summaries import SummaryMirror
from kvp2p.tierstate import COUNTS, Done, Kind, Step, TierState, Verdict
from kvp2p.watch import SummaryWatcher

__all__ = ["ASK_WAIT_WARN_S", "COUNTS", "Done", "Kind", "Step", "TierCore", "TierState", "Verdict", "ids"]

log = logging.getLogger("kvp2p.tier")

# A peer's ask that waited longer than this for the engine's scheduler step
# is logged (a warning): its requester is then likely to fall back.
ASK_WAIT_WARN_S = 1.0


class TierCore:
    """One engine's side of the engine API, batched per scheduler step: a
    TierState, its lock, its worker thread and its sidecar client."""

    def __init__(
        self,
        socket: str,
        register: pb.Register,
        *,
        poll_interval: float = 0.002,
        grant_hold: float = 5.0,
        client_opts: Mapping[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        state: TierState | None = None,
        summary_max_age: float = 3.0,
    ) -> None:
        """`state` is the state to drive (default: a new one with
        `grant_hold`, and a summary mirror whose summaries are unused
        `summary_max_age` after their last update); `clock` the time
        grants are held, asks waited and summaries aged in."""
        self._state = state if state is not None else TierState(
            grant_hold=grant_hold, mirror=SummaryMirror(max_age=summary_max_age))
        self._mu = threading.Lock()
        self._cv = threading.Condition(self._mu)  # drain waits on it
        self._clock = clock
        self._poll = poll_interval
        self._wake = threading.Event()
        self._closed = threading.Event()
        self.client = EngineClient(socket, register, on_ask=self.on_ask, on_release=self.on_release,
                                   on_lost=self.on_lost, on_attached=self.on_attached,
                                   **dict(client_opts or {}))
        self._worker = threading.Thread(target=self._run, name="kvp2p-step", daemon=True)
        self._watcher = SummaryWatcher(self.client, self._state.mirror, self.set_find, clock=clock)

    def start(self) -> None:
        self.client.start()
        self._worker.start()
        self._watcher.start()

    def close(self) -> None:
        self._closed.set()
        self._wake.set()
        if self._worker.is_alive():
            self._worker.join(timeout=2.0)
        self._watcher.close()
        self.client.close()

    def set_find(self, enabled: bool) -> None:
        """Whether the sidecar has find on (the watcher learns it)."""
        with self._mu:
            self._state.set_find(enabled)

    @property
    def mirror(self) -> SummaryMirror:
        """The peers' summaries (read-only for callers)."""
        return self._state.mirror

    # -- the scheduler's hooks: memory only ---------------------------------

    def new_request(self, req_id: str, params: Mapping[str, Any] | None) -> Roles:
        with self._mu:
            return self._state.new_request(req_id, params)

    def lookup(self, req_id: str, k16: bytes) -> Verdict:
        with self._mu:
            return self._state.lookup(req_id, k16)

    def submit_load(self, job_id: int, req_id: str, keys: Sequence[bytes], chunks: Sequence[int]) -> None:
        with self._mu:
            self._state.submit_load(job_id, req_id, keys, chunks)

    def submit_store(self, job_id: int, req_id: str, keys: Sequence[bytes], chunks: Sequence[int]) -> None:
        with self._mu:
            self._state.submit_store(job_id, req_id, keys, chunks)

    def request_finished(self, req_id: str) -> None:
        with self._mu:
            self._state.request_finished(req_id)

    def schedule_end(self, preempted: Collection[str] = ()) -> None:
        with self._mu:
            self._state.schedule_end(preempted)
        self._wake.set()

    @property
    def generation(self) -> int:
        """Bumped each time the sidecar is lost (one int read: no lock)."""
        return self._state.generation

    def take_finished(self) -> list[Done]:
        with self._mu:
            return self._state.take_finished()

    def take_asks(self) -> list[pb.ServeAsk]:
        with self._mu:
            asks, waited = self._state.take_asks(self._clock())
        if waited > ASK_WAIT_WARN_S:
            # Peers' asks are served only at this engine's scheduler steps
            # (vLLM 0.32 has no tier-poll thread); the sidecar answers MISS
            # for them after its engine.serve_timeout. Say when it happened.
            log.warning("kvp2p: a peer's lookup waited %.1fs for this engine's scheduler step; the sidecar "
                        "answers MISS after its engine.serve_timeout", waited)
        return asks

    def grant(self, ask_id: int, pin_job_id: int | None, keys: Sequence[bytes], chunks: Sequence[int]) -> None:
        """Answers an ask. pin_job_id is the store job vLLM made to pin the
        chunks (None when nothing was pinned); it is reported done when the
        sidecar releases it."""
        pin = 0 if pin_job_id is None else pin_job_id + 1
        with self._mu:
            self._state.granted(pin, len(chunks))
        ok = self.client.grant(pb.ServeGrant(ask_id=ask_id, pin_id=pin, keys=keys, chunk_ids=chunks))
        if not ok and pin:
            self.on_release([pin])

    def take_counts(self) -> dict[str, int]:
        """The COUNTS since the last call (non-zero ones), and resets them."""
        with self._mu:
            return self._state.take_counts()

    def has_pending_work(self) -> bool:
        with self._mu:
            return self._state.has_pending_work()

    def lent(self) -> int:
        """Pins lent to peers and not released yet."""
        with self._mu:
            return self._state.lent()

    def drain(self, warn_after: float = 5.0) -> None:
        """Blocks until no load, store or grant is in flight (vLLM's drain_jobs)."""
        start = time.monotonic()
        warned = False
        self._wake.set()
        while True:
            with self._cv:
                jobs, pins = self._state.in_flight()
                if not jobs and not pins:
                    return
                self._cv.wait(0.05)
            self.tick()
            if not warned and time.monotonic() - start > warn_after:
                log.warning("kvp2p: drain_jobs still waiting after %.0fs: %d jobs, %d grants",
                            warn_after, jobs, pins)
                warned = True

    # -- the client's callbacks ---------------------------------------------

    def on_ask(self, ask: pb.ServeAsk) -> None:
        with self._mu:
            self._state.ask_arrived(ask, self._clock())

    def on_release(self, pins: Sequence[int]) -> None:
        with self._cv:
            self._state.released(pins)
            self._cv.notify_all()

    def on_lost(self, why: str) -> None:
        proc = self.client.sidecar
        with self._cv:
            self._state.lost(why, self._clock(), proc)
            self._cv.notify_all()

    def on_attached(self, _registered: pb.Registered) -> None:
        with self._cv:
            self._state.attached()
            self._cv.notify_all()

    def tick(self) -> None:
        """Gives back the chunks lent to a lost sidecar whose process has
        exited (or, the process unknown, after grant_hold), and ages the
        peers' summaries. The worker calls it every turn, drain while it
        waits."""
        self._state.mirror.advance(self._clock())
        with self._mu:
            procs = self._state.held_processes()
        gone = {p for p in procs if p.gone()}  # reads /proc: not under the lock
        with self._cv:
            overdue = self._state.release_held(self._clock(), gone)
            self._cv.notify_all()
        for proc, since in overdue:
            log.warning("kvp2p: sidecar (pid %d) lost %.0fs ago but alive (frozen?): holding the chunks "
                        "it may still send to peers until it registers again or exits", proc.pid, since)

    # -- the worker ---------------------------------------------------------

    def next_step(self) -> Step | None:
        """Takes the next Step from the state (None: nothing to say). The
        worker calls it, then client.step, then apply or step_failed; a
        test that plays the worker calls them itself."""
        with self._mu:
            step = self._state.next_step(self.client.registered)
        if step is not None and step.more:
            self._wake.set()  # the rest goes at once
        return step

    def apply(self, step: Step, resp: pb.StepResponse) -> None:
        """Files the sidecar's answer to `step`."""
        with self._cv:
            self._state.apply(step, resp)
            self._cv.notify_all()

    def step_failed(self, step: Step, why: str, kind: str) -> None:
        """`step` got no answer: its jobs fail and its requests fall back."""
        with self._cv:
            self._state.step_failed(step, why, kind)
            self._cv.notify_all()

    def _run(self) -> None:
        while not self._closed.is_set():
            self.tick()
            with self._mu:
                busy = self._state.awaits_sidecar()
            self._wake.wait(self._poll if busy else 0.1)
            self._wake.clear()
            if self._closed.is_set():
                return
            step = self.next_step()
            if step is not None:
                self._send(step)

    def _send(self, step: Step) -> None:
        try:
            resp = self.client.step(step.request)
        except SidecarUnavailable as e:
            self.step_failed(step, f"sidecar unavailable: {e}", "unavailable")
        except StepRefused as e:
            log.error("kvp2p: sidecar refused a step (%s); its jobs fail, its requests fall back", e)
            self.step_failed(step, str(e), "refused")
        except Exception as e:  # noqa: BLE001 - never let the worker die
            log.exception("kvp2p: step failed")
            self.step_failed(step, f"step failed: {e}", "error")
        else:
            self.apply(step, resp)


def ids(items: Iterable[int]) -> list[int]:
    """Plain ints from numpy or Python ints (chunk ids)."""
    return [int(i) for i in items]
