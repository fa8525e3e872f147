"""Units without a sidecar: roles, keys, the region file, the tier's state."""

from __future__ import annotations

import logging
import os
import tempfile
from typing import TYPE_CHECKING

import pytest

from kvp2p import roles
from kvp2p.client import target_of
from kvp2p.keys import KeyBook, key16
from kvp2p.region import Region, vllm_region_path

if TYPE_CHECKING:
    from kvp2p.tier import Step, TierState


def test_roles_as_vllm_parses_them() -> None:
    src = {"remote_host": "10.0.0.1", "remote_port": 5710, "kv_request_id": "kv"}
    r = roles.parse({"remote_kv_source": src})
    assert r.source is not None and not r.source.pd and r.dest is None
    r = roles.parse({"remote_prefiller": src, "remote_kv_source": {**src, "remote_host": "x"}})
    assert r.source is not None and r.source.pd and r.source.host == "10.0.0.1"  # prefiller wins
    # Incomplete consumer roles are no role (vLLM's _parse_source).
    assert not roles.parse({"remote_kv_source": {"remote_host": "h", "remote_port": 1}}).any
    assert not roles.parse({"remote_prefiller": {"remote_port": 1, "kv_request_id": "k"}}).any
    assert not roles.parse({"remote_kv_source": {**src, "remote_port": "not-a-port"}}).any
    assert not roles.parse(None).any and not roles.parse({}).any
    # A malformed remote_decoder still marks the request (its stores fail).
    d = roles.parse({"remote_decoder": {}})
    assert d.dest is not None and d.dest.kv_request_id is None
    p = roles.parse({"remote_decoder": {"kv_request_id": "x"}}).to_pb()
    assert p.HasField("remote_decoder") and p.remote_decoder.kv_request_id == "x" and not p.remote_decoder.host
    # remote_decoder may name the decoder: only it may then fetch.
    p = roles.parse({"remote_decoder": {"kv_request_id": "x", "remote_host": "10.0.0.2", "remote_port": "5711"}}).to_pb()
    assert p.remote_decoder.host == "10.0.0.2" and p.remote_decoder.port == 5711
    p = roles.parse({"remote_decoder": {"kv_request_id": "x", "remote_host": "10.0.0.2", "remote_port": "x"}}).to_pb()
    assert not p.remote_decoder.host and p.remote_decoder.kv_request_id == "x"
    p = roles.parse({"remote_prefiller": src}).to_pb()
    assert p.remote_prefiller.port == 5710 and p.remote_prefiller.kv_request_id == "kv"
    assert not p.HasField("remote_kv_source")


def test_key16_is_stable_and_16_bytes() -> None:
    k = key16(b"\x01" * 36)
    assert len(k) == 16 and k == key16(b"\x01" * 36) and k != key16(b"\x02" * 36)
    import hashlib

    assert k == hashlib.blake2b(b"\x01" * 36, digest_size=16).digest()


def test_keybook_is_bounded() -> None:
    b = KeyBook(2)
    b.remember(b"a", b"A")
    b.remember(b"b", b"B")
    b.remember(b"a", b"A")  # refreshed
    b.remember(b"c", b"C")
    assert b.get(b"b") is None and b.get(b"a") == b"A" and b.get(b"c") == b"C" and len(b) == 2
    with pytest.raises(ValueError):
        KeyBook(0)


def test_region_chunks() -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "r.mmap")
        with Region(path, 4, 4096, create=True) as r:
            r.write(3, b"\x07" * 4096)
            r.chunk(0)[:2] = b"hi"
        assert os.stat(path).st_mode & 0o777 == 0o600
        with Region(path, 4, 4096) as r:
            assert r.read(3) == b"\x07" * 4096 and r.read(0)[:2] == b"hi"
            with pytest.raises(IndexError):
                r.read(4)
            with pytest.raises(ValueError):
                r.write(0, b"short")
        with pytest.raises(ValueError):
            Region(path, 8, 4096)  # the file is too small for that layout
    assert vllm_region_path("e1") == "/dev/shm/vllm_offload_e1.mmap"


def test_targets() -> None:
    assert target_of("/run/k.sock") == "unix:/run/k.sock"
    assert target_of("127.0.0.1:9000") == "127.0.0.1:9000"
    assert target_of("unix:/x") == "unix:/x"


def test_state_sends_nothing_for_an_idle_step() -> None:
    from kvp2p.tier import TierState, Verdict

    st = TierState()
    st.schedule_end()
    assert st.next_step(None) is None  # an idle step costs no RPC
    st.new_request("r", {"remote_kv_source": {"remote_host": "h", "remote_port": 1, "kv_request_id": "k"}})
    assert st.lookup("r", b"k" * 16) == Verdict.RETRY
    st.schedule_end()
    step = st.next_step(None)
    assert step is not None
    req = step.request
    assert [n.req_id for n in req.new_requests] == ["r"] and req.end_step
    assert [b.keys_packed for b in req.lookups] == [b"k" * 16] and step.asked == {"r": [b"k" * 16]}
    assert all(b.packed_verdicts for b in req.lookups)  # answered one byte per key


def test_lost_sidecar_holds_grants_until_it_registers_again() -> None:
    from kvp2p.tier import Kind, TierState

    now = 100.0
    st = TierState(grant_hold=5.0)
    st.granted(9, 1)  # two pins lent to peers (API ids: vLLM's job id + 1)
    st.granted(10, 2)
    assert st.lent() == 2
    st.lost("test", now, None)
    assert not [d for d in st.take_finished() if d.kind == Kind.PIN]  # a frozen sidecar may still read them
    assert st.has_pending_work() and st.in_flight() == (0, 2) and st.lent() == 0
    now += 4.9
    assert st.release_held(now, ()) == []
    assert not [d for d in st.take_finished() if d.kind == Kind.PIN]
    st.attached()  # registered again: no old chunk in use
    assert sorted(d.job_id for d in st.take_finished() if d.kind == Kind.PIN) == [8, 9]
    st.granted(6, 1)
    st.lost("again", now, None)
    now += 5.0
    st.release_held(now, ())  # or, the sidecar's process unknown, the hold runs out
    assert [d.job_id for d in st.take_finished() if d.kind == Kind.PIN] == [5]
    assert st.in_flight() == (0, 0)


def test_lost_sidecar_of_known_process_holds_grants_until_it_exits(caplog: pytest.LogCaptureFixture) -> None:
    """TierCore asks the lost sidecar's process whether it exited; until
    it has, however long that takes, its lent chunks stay pinned (told once
    past grant_hold)."""
    from kvp2p._pb import engine_pb2 as pb
    from kvp2p.client import SidecarProcess
    from kvp2p.tier import Kind, TierCore, TierState

    class Proc(SidecarProcess):
        exited = False

        def gone(self) -> bool:
            return self.exited

    now = [100.0]
    st = TierState(grant_hold=5.0)
    st.granted(9, 1)
    st.granted(10, 1)
    core = TierCore("/nonexistent.sock", pb.Register(), clock=lambda: now[0], state=st)  # not started
    proc = Proc(pid=42, start="1")
    core.client.sidecar = proc  # what the step socket's peer credentials named
    core.on_lost("frozen")
    with caplog.at_level(logging.WARNING, logger="kvp2p.tier"):
        for _ in range(3):  # a frozen sidecar: however long, its chunks stay pinned
            now[0] += 60.0
            core.tick()
            assert not [d for d in core.take_finished() if d.kind == Kind.PIN]
    assert [r.getMessage().split(":")[1] for r in caplog.records] == [" sidecar (pid 42) lost 60s ago but alive (frozen?)"]
    Proc.exited = True  # its process exited: nothing of it can read the region
    core.tick()
    assert sorted(d.job_id for d in core.take_finished() if d.kind == Kind.PIN) == [8, 9]
    assert not core.has_pending_work()


def test_state_holds_a_finish_back_from_its_own_jobs_step() -> None:
    # The sidecar applies a step's finished and preempted requests before
    # its jobs (engine.proto): a finish sent with its request's store would
    # forget the request first, and the store would serve no one (a PD
    # decoder would then wait for blocks that never come). A starved
    # worker thread batches both into one step: the finish waits one step.
    from kvp2p.tier import TierState

    st = TierState()
    st.new_request("p", {"remote_decoder": {"kv_request_id": "kv"}})
    st.submit_store(0, "p", [b"k" * 16], [3])
    st.new_request("q", {"remote_decoder": {"kv_request_id": "kv2"}})
    st.request_finished("p")
    st.request_finished("q")  # registered and finished before any step: no job of its own here
    st.new_request("o", {"remote_prefiller": {"remote_host": "h", "remote_port": 1, "kv_request_id": "k3"}})
    st.submit_load(4, "o", [b"o" * 16], [5])
    st.schedule_end(preempted=["o"])
    first = st.next_step(None)
    assert first is not None and first.more
    req = first.request
    assert [j.req_id for j in req.stores] == ["p"] and [j.req_id for j in req.loads] == ["o"]
    assert sorted(n.req_id for n in req.new_requests) == ["o", "p", "q"]
    assert list(req.finished) == [] and list(req.preempted) == []  # not with their own step's work
    second = st.next_step(None)
    assert second is not None and not second.more
    req = second.request
    assert sorted(req.finished) == ["p", "q"] and list(req.preempted) == ["o"]
    assert not req.stores and not req.loads and not req.new_requests


def test_state_keeps_steps_within_the_sidecars_limits() -> None:
    """What does not fit the limits Registered states waits for the next
    Step, in order; a job larger than a whole Step fails at once and its
    request falls back."""
    from kvp2p._pb import engine_pb2 as pb
    from kvp2p.tier import Kind, TierState, Verdict

    st = TierState()
    src = {"remote_host": "h", "remote_port": 1, "kv_request_id": "k"}
    for r in ("a", "b", "c"):
        st.new_request(r, {"remote_kv_source": src})
    st.submit_load(0, "a", [b"a" * 16] * 3, [0, 1, 2])
    st.submit_load(1, "b", [b"b" * 16] * 5, [3, 4, 5, 6, 7])  # more than a step's 4 keys
    st.submit_load(2, "c", [b"c" * 16] * 2, [8, 9])
    st.schedule_end()
    reg = pb.Registered(max_keys_per_step=4, max_jobs_in_flight=8)
    first = st.next_step(reg)
    assert first is not None and first.more
    assert [j.job_id for j in first.request.loads] == [1]  # a's 3 keys; c's 2 would make 5
    assert [(d.job_id, d.kind, d.success) for d in st.take_finished()] == [(1, Kind.LOAD, False)]
    assert st.lookup("b", b"b" * 16) == Verdict.MISS  # b fell back
    second = st.next_step(reg)
    assert second is not None and [j.job_id for j in second.request.loads] == [3]
    assert st.in_flight() == (2, 0)


def test_failed_load_and_failed_step_fall_back() -> None:
    """A request the sidecar names in failed_requests (its load failed)
    and the requests of a Step that got no answer answer MISS from then
    on, and their new loads fail at once."""
    from kvp2p._pb import engine_pb2 as pb
    from kvp2p.tier import Kind, TierState, Verdict

    st = TierState()
    src = {"remote_host": "h", "remote_port": 1, "kv_request_id": "k"}
    k = b"k" * 16
    for r in ("a", "c"):
        st.new_request(r, {"remote_kv_source": src})
        assert st.lookup(r, k) == Verdict.RETRY
    st.submit_load(0, "a", [k], [0])
    st.schedule_end()
    step = st.next_step(None)
    assert step is not None and set(step.asked) == {"a", "c"}
    st.apply(step, pb.StepResponse(finished=[pb.JobDone(job_id=1, kind=pb.JOB_KIND_LOAD, success=False,
                                                         reason="peer gone")],
                                   failed_requests=["a"]))
    assert [(d.job_id, d.success, d.reason) for d in st.take_finished()] == [(0, False, "peer gone")]
    st.schedule_end()
    assert [st.lookup(r, k) for r in ("a", "c")] == [Verdict.MISS, Verdict.RETRY]
    st.submit_load(1, "a", [k], [1])
    assert [(d.job_id, d.kind, d.success) for d in st.take_finished()] == [(1, Kind.LOAD, False)]
    st.schedule_end()
    step = st.next_step(None)
    assert step is not None and set(step.asked) == {"c"}
    st.step_failed(step, "sidecar unavailable: test", "unavailable")
    assert st.lookup("c", k) == Verdict.MISS
    assert st.take_counts() == {"steps": 1, "step_failures_unavailable": 1}


def _answer(st: "TierState", step: "Step", verdict: int) -> None:
    """What the worker thread does with the sidecar's answer to `step`:
    every key asked gets `verdict`."""
    from kvp2p._pb import engine_pb2 as pb

    resp = pb.StepResponse(lookups=[pb.LookupAnswer(req_id=rid, verdicts_packed=bytes([verdict]) * len(ks))
                                    for rid, ks in step.asked.items()])
    st.apply(step, resp)


def test_answers_landing_mid_pass_wait_for_the_pass_boundary() -> None:
    # Issue 23: the worker filed a peer's answers while vLLM's scheduler was
    # partway through a request's lookup pass; vLLM saw the first blocks
    # RETRY and the rest HIT and promoted them as two load jobs in two steps
    # (7+6), and the second failed. A pass must see one view: answers are
    # published at the step's end or at the next step's first lookup.
    from kvp2p._pb import engine_pb2 as pb
    from kvp2p.tier import TierState, Verdict

    st = TierState()  # the test is the worker
    src = {"remote_host": "h", "remote_port": 1, "kv_request_id": "k"}
    keys = [bytes([i]) * 16 for i in range(13)]
    st.new_request("r", {"remote_kv_source": src})
    assert [st.lookup("r", k) for k in keys] == [Verdict.RETRY] * 13  # pass 1: asks
    st.schedule_end()
    step = st.next_step(None)
    assert step is not None
    assert step.asked == {"r": keys}
    # Pass 2: the answer lands after the 7th lookup.
    first = [st.lookup("r", k) for k in keys[:7]]
    _answer(st, step, pb.VERDICT_HIT)
    rest = [st.lookup("r", k) for k in keys[7:]]
    assert first + rest == [Verdict.RETRY] * 13, "a pass saw two views"
    assert st.has_pending_work()  # the engine steps on, to publish it
    again = st.next_step(None)
    assert again is None or not again.asked, "answered keys were asked again"
    st.schedule_end()
    assert [st.lookup("r", k) for k in keys] == [Verdict.HIT] * 13  # pass 3: all at once
    st.schedule_end()

    # PD: the first HIT makes every block a HIT; that too waits for the boundary.
    st.new_request("d", {"remote_prefiller": src})
    assert st.lookup("d", keys[0]) == Verdict.RETRY
    st.schedule_end()
    step = st.next_step(None)
    assert step is not None
    assert st.lookup("d", keys[0]) == Verdict.RETRY
    _answer(st, step, pb.VERDICT_HIT)
    assert [st.lookup("d", k) for k in keys[1:]] == [Verdict.RETRY] * 12
    st.schedule_end()
    assert [st.lookup("d", k) for k in keys] == [Verdict.HIT] * 13


def test_answers_between_steps_are_seen_by_the_next_pass() -> None:
    # Publishing at the step's first lookup too: an answer that lands while
    # the engine runs the model costs no extra step. A request that ends
    # before its answers are published leaves nothing behind.
    from kvp2p._pb import engine_pb2 as pb
    from kvp2p.tier import TierState, Verdict

    st = TierState()
    src = {"remote_host": "h", "remote_port": 1, "kv_request_id": "k"}
    keys = [bytes([i]) * 16 for i in range(3)]
    for rid in ("r", "gone"):
        st.new_request(rid, {"remote_kv_source": src})
        assert [st.lookup(rid, k) for k in keys] == [Verdict.RETRY] * 3
    st.schedule_end()
    step = st.next_step(None)
    assert step is not None
    _answer(st, step, pb.VERDICT_MISS)  # between steps
    assert st.holds("gone")
    st.request_finished("gone")
    assert [st.lookup("r", k) for k in keys] == [Verdict.MISS] * 3
    assert not st.holds("gone")
    st.schedule_end()
    st.next_step(None)  # the finish goes out
    assert not st.has_pending_work()


def _step_server(answer_when: "threading.Event") -> tuple[str, "threading.Thread", list[bytes]]:
    """A step socket that answers one step (status OK, body b"ok") only once
    `answer_when` is set: a sidecar slow to answer, deterministically."""
    import socket
    import struct
    import threading

    d = tempfile.mkdtemp(prefix="kvp2p-step-")
    path = os.path.join(d, "s.step")
    ln = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ln.bind(path)
    ln.listen(1)
    got: list[bytes] = []

    def serve() -> None:
        c, _ = ln.accept()
        with c:
            (n,) = struct.unpack("<I", c.recv(4, socket.MSG_WAITALL))
            got.append(c.recv(n, socket.MSG_WAITALL))
            if answer_when.wait(10):
                c.sendall(struct.pack("<I", 3) + b"\x00ok")
            c.recv(1)  # until the client closes
        ln.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return path, t, got


def test_slow_step_is_waited_for_while_the_sidecar_lives() -> None:
    """Past step_timeout a step goes on waiting while wait_on says the
    sidecar is alive, and gets its answer: a slow sidecar is not lost."""
    import threading

    from kvp2p.client import StepSocket

    late = threading.Event()
    path, t, got = _step_server(late)
    s = StepSocket(path, 0.05)
    asked: list[float] = []

    def wait_on(waited: float) -> bool:
        asked.append(waited)
        late.set()  # the answer comes only after the step's timeout passed
        return True

    try:
        assert s.call(b"step", 0.05, wait_on) == (0, b"ok")
    finally:
        s.close()
    t.join(5)
    assert got == [b"step"] and asked and asked[0] >= 0.05


def test_slow_step_gives_up_when_the_sidecar_is_not_heard_from() -> None:
    import threading

    from kvp2p.client import StepSocket

    never = threading.Event()
    path, t, _ = _step_server(never)
    s = StepSocket(path, 0.05)
    asked: list[float] = []
    try:
        with pytest.raises(TimeoutError):
            s.call(b"step", 0.05, lambda waited: bool(asked.append(waited)) or len(asked) < 3)
    finally:
        s.close()
    never.set()
    t.join(5)
    assert len(asked) == 3 and asked[0] >= 0.05 and asked == sorted(asked)


def test_sidecar_process_runnable_tells_starved_from_frozen_and_idle() -> None:
    """runnable(): a process with a thread running or waiting for a CPU
    (a starved sidecar) is runnable; a stopped one (SIGSTOP) and one
    asleep are not."""
    import signal
    import subprocess
    import sys

    from kvp2p.client import SidecarProcess, proc_stat

    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        procs = {}
        for name, p in (("busy", busy), ("idle", idle)):
            st = None
            while st is None:
                st = proc_stat(p.pid)
            procs[name] = SidecarProcess(p.pid, st[1])
        import time

        # Until the interpreter has started and spins: while it starts it
        # may sleep on a file read (seen once in CI, just after spawn).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not procs["busy"].runnable():
            time.sleep(0.01)
        assert procs["busy"].runnable()
        deadline = time.monotonic() + 30  # until the interpreter has started and sleeps
        while time.monotonic() < deadline:
            if proc_stat(idle.pid)[0] == "S" and not procs["idle"].runnable():
                break
            time.sleep(0.01)
        assert not procs["idle"].runnable()
        busy.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc_stat(busy.pid)[0] != "T":
            time.sleep(0.01)
        assert not procs["busy"].runnable()
    finally:
        for p in (busy, idle):
            p.kill()
            p.wait()


def test_a_peers_ask_that_waited_for_a_step_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    """vLLM 0.32 serves peers' asks only at its scheduler steps: an ask that
    waited over ASK_WAIT_WARN_S is said in the engine's log, since its
    requester likely fell back; one served at once is not."""
    from kvp2p import tier
    from kvp2p._pb import engine_pb2 as pb

    clock = [100.0]
    # Not started: the test is the client's thread.
    core = tier.TierCore("/nonexistent.sock", pb.Register(), clock=lambda: clock[0])
    core.on_ask(pb.ServeAsk(ask_id=1))
    clock[0] += 0.2
    core.on_ask(pb.ServeAsk(ask_id=2))
    with caplog.at_level(logging.WARNING, logger="kvp2p.tier"):
        assert [a.ask_id for a in core.take_asks()] == [1, 2]
        assert not caplog.records
        core.on_ask(pb.ServeAsk(ask_id=3))
        clock[0] += tier.ASK_WAIT_WARN_S + 0.5
        core.on_ask(pb.ServeAsk(ask_id=4))
        assert [a.ask_id for a in core.take_asks()] == [3, 4]
    assert [r.getMessage() for r in caplog.records] == [
        "kvp2p: a peer's lookup waited 1.5s for this engine's scheduler step; the sidecar answers MISS after its "
        "engine.serve_timeout"]
