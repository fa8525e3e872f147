"""Units without a sidecar: roles, keys, the region file."""

from __future__ import annotations

import logging
import os
import tempfile

import pytest

from kvp2p import roles
from kvp2p.client import target_of
from kvp2p.keys import KeyBook, key16
from kvp2p.region import Region, vllm_region_path


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


def test_core_sends_nothing_for_an_idle_step() -> None:
    from kvp2p._pb import engine_pb2 as pb
    from kvp2p.tier import TierCore, Verdict

    core = TierCore("/nonexistent.sock", pb.Register())  # not started: no threads, no sidecar
    core.schedule_end()
    assert core._take() is None  # an idle step costs no RPC
    core.new_request("r", {"remote_kv_source": {"remote_host": "h", "remote_port": 1, "kv_request_id": "k"}})
    assert core.lookup("r", b"k" * 16) == Verdict.RETRY
    core.schedule_end()
    taken = core._take()
    assert taken is not None
    req, _, asked = taken
    assert [n.req_id for n in req.new_requests] == ["r"] and req.end_step
    assert [b.keys_packed for b in req.lookups] == [b"k" * 16] and asked == {"r": [b"k" * 16]}
    assert all(b.packed_verdicts for b in req.lookups)  # answered one byte per key


def test_lost_sidecar_holds_grants_until_it_registers_again() -> None:
    from kvp2p._pb import engine_pb2 as pb
    from kvp2p.tier import Kind, TierCore

    now = [100.0]
    core = TierCore("/nonexistent.sock", pb.Register(), grant_hold=5.0)  # not started
    core._now = lambda: now[0]
    core._grants.update({8, 9})  # two pins lent to peers
    core._on_lost("test")
    assert not [d for d in core.take_finished() if d.kind == Kind.PIN]  # a frozen sidecar may still read them
    assert core.has_pending_work()
    now[0] += 4.9
    core._release_held(attached=False)
    assert not [d for d in core.take_finished() if d.kind == Kind.PIN]
    core._on_attached(pb.Registered(registration=2))  # registered again: no old chunk in use
    assert sorted(d.job_id for d in core.take_finished() if d.kind == Kind.PIN) == [7, 8]
    core._grants.add(5)
    core._on_lost("again")
    now[0] += 5.0
    core._release_held(attached=False)  # or, the sidecar's process unknown, the hold runs out
    assert [d.job_id for d in core.take_finished() if d.kind == Kind.PIN] == [4]


def test_lost_sidecar_of_known_process_holds_grants_until_it_exits() -> None:
    from kvp2p._pb import engine_pb2 as pb
    from kvp2p.client import SidecarProcess
    from kvp2p.tier import Kind, TierCore

    class Proc(SidecarProcess):
        exited = False

        def gone(self) -> bool:
            return self.exited

    now = [100.0]
    core = TierCore("/nonexistent.sock", pb.Register(), grant_hold=5.0)  # not started
    core._now = lambda: now[0]
    proc = Proc(pid=42, start="1")
    core.client.sidecar = proc  # what the step socket's peer credentials named
    core._grants.update({8, 9})
    core._on_lost("frozen")
    for _ in range(3):  # a frozen sidecar: however long, its chunks stay pinned
        now[0] += 60.0
        core._release_held(attached=False)
        assert not [d for d in core.take_finished() if d.kind == Kind.PIN]
    Proc.exited = True  # its process exited: nothing of it can read the region
    core._release_held(attached=False)
    assert sorted(d.job_id for d in core.take_finished() if d.kind == Kind.PIN) == [7, 8]
    assert not core.has_pending_work()


def test_core_holds_a_finish_back_from_its_own_jobs_step() -> None:
    # The sidecar applies a step's finished and preempted requests before
    # its jobs (engine.proto): a finish sent with its request's store would
    # forget the request first, and the store would serve no one (a PD
    # decoder would then wait for blocks that never come). A starved
    # worker thread batches both into one step: the finish waits one step.
    from kvp2p._pb import engine_pb2 as pb
    from kvp2p.tier import TierCore

    core = TierCore("/nonexistent.sock", pb.Register())  # not started: no threads, no sidecar
    core.new_request("p", {"remote_decoder": {"kv_request_id": "kv"}})
    core.submit_store(0, "p", [b"k" * 16], [3])
    core.new_request("q", {"remote_decoder": {"kv_request_id": "kv2"}})
    core.request_finished("p")
    core.request_finished("q")  # registered and finished before any step: no job of its own here
    core.new_request("o", {"remote_prefiller": {"remote_host": "h", "remote_port": 1, "kv_request_id": "k3"}})
    core.submit_load(4, "o", [b"o" * 16], [5])
    core.schedule_end(preempted=["o"])
    first = core._take()
    assert first is not None
    req, _, _ = first
    assert [j.req_id for j in req.stores] == ["p"] and [j.req_id for j in req.loads] == ["o"]
    assert sorted(n.req_id for n in req.new_requests) == ["o", "p", "q"]
    assert list(req.finished) == [] and list(req.preempted) == []  # not with their own step's work
    second = core._take()
    assert second is not None
    req, _, _ = second
    assert sorted(req.finished) == ["p", "q"] and list(req.preempted) == ["o"]
    assert not req.stores and not req.loads and not req.new_requests


def _answer(core: object, asked: dict[str, list[bytes]], verdict: int) -> None:
    """What the worker thread does with the sidecar's answer to `asked`:
    every key gets `verdict`."""
    from kvp2p._pb import engine_pb2 as pb

    resp = pb.StepResponse(lookups=[pb.LookupAnswer(req_id=rid, verdicts_packed=bytes([verdict]) * len(ks))
                                    for rid, ks in asked.items()])
    core._apply(resp, core._gen, asked)  # type: ignore[attr-defined]


def test_answers_landing_mid_pass_wait_for_the_pass_boundary() -> None:
    # Issue 23: the worker filed a peer's answers while vLLM's scheduler was
    # partway through a request's lookup pass; vLLM saw the first blocks
    # RETRY and the rest HIT and promoted them as two load jobs in two steps
    # (7+6), and the second failed. A pass must see one view: answers are
    # published at the step's end or at the next step's first lookup.
    from kvp2p._pb import engine_pb2 as pb
    from kvp2p.tier import TierCore, Verdict

    core = TierCore("/nonexistent.sock", pb.Register())  # not started: the test is the worker
    src = {"remote_host": "h", "remote_port": 1, "kv_request_id": "k"}
    keys = [bytes([i]) * 16 for i in range(13)]
    core.new_request("r", {"remote_kv_source": src})
    assert [core.lookup("r", k) for k in keys] == [Verdict.RETRY] * 13  # pass 1: asks
    core.schedule_end()
    taken = core._take()
    assert taken is not None
    asked = taken[2]
    assert asked == {"r": keys}
    # Pass 2: the answer lands after the 7th lookup.
    first = [core.lookup("r", k) for k in keys[:7]]
    _answer(core, asked, pb.VERDICT_HIT)
    rest = [core.lookup("r", k) for k in keys[7:]]
    assert first + rest == [Verdict.RETRY] * 13, "a pass saw two views"
    assert core.has_pending_work()  # the engine steps on, to publish it
    again = core._take()
    assert again is None or not again[2], "answered keys were asked again"
    core.schedule_end()
    assert [core.lookup("r", k) for k in keys] == [Verdict.HIT] * 13  # pass 3: all at once
    core.schedule_end()

    # PD: the first HIT makes every block a HIT; that too waits for the boundary.
    core.new_request("d", {"remote_prefiller": src})
    assert core.lookup("d", keys[0]) == Verdict.RETRY
    core.schedule_end()
    taken = core._take()
    assert taken is not None
    assert core.lookup("d", keys[0]) == Verdict.RETRY
    _answer(core, taken[2], pb.VERDICT_HIT)
    assert [core.lookup("d", k) for k in keys[1:]] == [Verdict.RETRY] * 12
    core.schedule_end()
    assert [core.lookup("d", k) for k in keys] == [Verdict.HIT] * 13


def test_answers_between_steps_are_seen_by_the_next_pass() -> None:
    # Publishing at the step's first lookup too: an answer that lands while
    # the engine runs the model costs no extra step. A request that ends
    # before its answers are published leaves nothing behind.
    from kvp2p._pb import engine_pb2 as pb
    from kvp2p.tier import TierCore, Verdict

    core = TierCore("/nonexistent.sock", pb.Register())
    src = {"remote_host": "h", "remote_port": 1, "kv_request_id": "k"}
    keys = [bytes([i]) * 16 for i in range(3)]
    for rid in ("r", "gone"):
        core.new_request(rid, {"remote_kv_source": src})
        assert [core.lookup(rid, k) for k in keys] == [Verdict.RETRY] * 3
    core.schedule_end()
    taken = core._take()
    assert taken is not None
    _answer(core, taken[2], pb.VERDICT_MISS)  # between steps
    core.request_finished("gone")
    assert [core.lookup("r", k) for k in keys] == [Verdict.MISS] * 3
    assert "gone" not in core._incoming and "gone" not in core._verdicts
    core.schedule_end()
    core._take()  # the finish goes out
    assert not core.has_pending_work()


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

    from kvp2p.client import _StepSocket

    late = threading.Event()
    path, t, got = _step_server(late)
    s = _StepSocket(path, 0.05)
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

    from kvp2p.client import _StepSocket

    never = threading.Event()
    path, t, _ = _step_server(never)
    s = _StepSocket(path, 0.05)
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

    from kvp2p.client import SidecarProcess, _proc_stat

    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        procs = {}
        for name, p in (("busy", busy), ("idle", idle)):
            st = None
            while st is None:
                st = _proc_stat(p.pid)
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
            if _proc_stat(idle.pid)[0] == "S" and not procs["idle"].runnable():
                break
            time.sleep(0.01)
        assert not procs["idle"].runnable()
        busy.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _proc_stat(busy.pid)[0] != "T":
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

    core = tier.TierCore("/nonexistent.sock", pb.Register())  # not started: the test is the client's thread
    clock = [100.0]
    core._now = lambda: clock[0]
    core._on_ask(pb.ServeAsk(ask_id=1))
    clock[0] += 0.2
    core._on_ask(pb.ServeAsk(ask_id=2))
    with caplog.at_level(logging.WARNING, logger="kvp2p.tier"):
        assert [a.ask_id for a in core.take_asks()] == [1, 2]
        assert not caplog.records
        core._on_ask(pb.ServeAsk(ask_id=3))
        clock[0] += tier.ASK_WAIT_WARN_S + 0.5
        core._on_ask(pb.ServeAsk(ask_id=4))
        assert [a.ask_id for a in core.take_asks()] == [3, 4]
    assert [r.getMessage() for r in caplog.records] == [
        "kvp2p: a peer's lookup waited 1.5s for this engine's scheduler step; the sidecar answers MISS after its "
        "engine.serve_timeout"]
