"""The Python client and tier core against two real `kvp2p serve` sidecars.

Each engine has its own region file and sidecar; blocks written into A's
region move through A's and B's sidecars into B's region, and are compared.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator

import pytest

from kvp2p._pb import engine_pb2 as pb
from kvp2p.client import StepRefused
from kvp2p.testing.fake_engine import FakeEngine, block, key
from kvp2p.testing import Sidecar
from kvp2p.tier import Kind, TierState, Verdict

Make = Callable[..., Sidecar]


@pytest.fixture
def engines(sidecars: Make) -> Iterator[Callable[..., FakeEngine]]:
    made: list[FakeEngine] = []

    def make(sc: Sidecar, **opts: object) -> FakeEngine:
        e = FakeEngine(sc, **opts)
        made.append(e)
        e.wait_attached()
        return e

    yield make
    for e in made:
        e.close()


def kv_source(sc: Sidecar, kv_id: str) -> dict[str, object]:
    return {"remote_kv_source": {"remote_host": "127.0.0.1", "remote_port": sc.port, "kv_request_id": kv_id}}


def prefiller(sc: Sidecar, kv_id: str) -> dict[str, object]:
    return {"remote_prefiller": {"remote_host": "127.0.0.1", "remote_port": sc.port, "kv_request_id": kv_id}}


def decoder(kv_id: str) -> dict[str, object]:
    return {"remote_decoder": {"kv_request_id": kv_id}}


def pd_ready(e: FakeEngine, req: str, seed: int) -> None:
    """Steps until the decode side's lookup says HIT (its sidecar reached the prefiller)."""
    e.verdicts(req, [seed])
    e.until(lambda: e.verdicts(req, [seed]) == [Verdict.HIT])


def test_symmetric_retry_then_hit_and_bytes_match(sidecars: Make, engines: Callable[..., FakeEngine]) -> None:
    sa, sb = sidecars("A"), sidecars("B")
    a, b = engines(sa), engines(sb)
    seeds = [1, 2, 3, 4]
    want = [a.put(s, chunk=i) for i, s in enumerate(seeds)]
    b.core.new_request("r1", kv_source(sa, "kv-r1"))
    assert b.verdicts("r1", seeds) == [Verdict.RETRY] * 4  # first sight: RETRY, probe batched at step end
    seen: list[list[Verdict]] = []

    def all_hit() -> bool:
        v = b.verdicts("r1", seeds)
        seen.append(v)
        return v == [Verdict.HIT] * 4

    b.until(all_hit, peers=(a,))
    assert Verdict.MISS not in [x for v in seen for x in v]
    dest = [20, 21, 22, 23]
    b.core.submit_load(0, "r1", [key(s) for s in seeds], dest)  # vLLM's job id 0 works
    b.until(lambda: b.job(0) is not None, peers=(a,))
    d = b.job(0)
    assert d is not None and d.success, d
    assert d.nbytes == 4 * sb.row_stride
    assert [b.region.read(c) for c in dest] == want
    # A's pin is released once B's sidecar is done reading.
    a.until(lambda: not a.pinned and any(x.kind == Kind.PIN for x in a.done), peers=(b,))
    b.core.request_finished("r1")


def test_symmetric_unknown_key_misses(sidecars: Make, engines: Callable[..., FakeEngine]) -> None:
    sa, sb = sidecars("A"), sidecars("B")
    a, b = engines(sa), engines(sb)
    a.put(1, chunk=0)
    b.core.new_request("r", kv_source(sa, "kv-r"))
    b.verdicts("r", [1, 99])
    b.until(lambda: Verdict.RETRY not in b.verdicts("r", [1, 99]), peers=(a,))
    assert b.verdicts("r", [1, 99]) == [Verdict.HIT, Verdict.MISS]


@pytest.mark.parametrize("order", ["store-before-fetch", "fetch-before-store"])
def test_pd(order: str, sidecars: Make, engines: Callable[..., FakeEngine]) -> None:
    sp, sd = sidecars("P"), sidecars("D")
    p, d = engines(sp), engines(sd)
    seeds = list(range(10, 18))
    chunks = list(range(8))
    want = [block(s, sp.row_stride) for s in seeds]

    def store() -> None:
        for s, c in zip(seeds, chunks):
            p.put(s, c)
        p.core.new_request("p1", decoder("kv-pd"))
        p.core.submit_store(5, "p1", [key(s) for s in seeds], chunks)
        p.step()

    def fetch() -> None:
        d.core.new_request("d1", prefiller(sp, "kv-pd"))
        # PD: RETRY while the sidecar connects to the prefiller, then HIT
        # for every key, with no probe of the prefiller.
        assert d.verdicts("d1", seeds) == [Verdict.RETRY] * len(seeds)
        d.until(lambda: d.verdicts("d1", seeds[:1]) == [Verdict.HIT])
        assert d.verdicts("d1", seeds) == [Verdict.HIT] * len(seeds)
        d.core.submit_load(7, "d1", [key(s) for s in seeds], list(range(30, 38)))
        d.step()

    if order == "store-before-fetch":
        store()
        fetch()
    else:
        fetch()
        for _ in range(20):  # the decoder waits for the prefiller's store
            d.step()
            p.step()
            time.sleep(0.002)
        assert d.job(7) is None
        store()
    d.until(lambda: d.job(7) is not None, peers=(p,))
    res = d.job(7)
    assert res is not None and res.success, res
    assert [d.region.read(c) for c in range(30, 38)] == want
    p.until(lambda: p.job(5, Kind.STORE) is not None, peers=(d,))
    st = p.job(5, Kind.STORE)
    assert st is not None and st.success, st
    p.core.request_finished("p1")
    d.core.request_finished("d1")


def test_store_without_decoder_is_local(sidecars: Make, engines: Callable[..., FakeEngine]) -> None:
    a = engines(sidecars("A"))
    a.core.new_request("plain", None)
    a.core.submit_store(3, "plain", [key(1)], [0])
    got = a.core.take_finished()
    assert [(x.job_id, x.kind, x.success) for x in got] == [(3, Kind.STORE, True)]
    assert a.core.lookup("plain", key(1)) == Verdict.MISS  # no source role


def test_killed_source_fails_load_then_miss(sidecars: Make, engines: Callable[..., FakeEngine]) -> None:
    sp, sd, s3 = sidecars("P"), sidecars("D"), sidecars("C")
    p, d, c = engines(sp), engines(sd), engines(s3)
    seeds = [1, 2, 3]
    # The decoder's load waits for a store that never comes: it is in
    # flight when the prefiller's sidecar dies.
    d.core.new_request("d1", prefiller(sp, "kv-dead"))
    pd_ready(d, "d1", seeds[0])
    d.core.submit_load(9, "d1", [key(s) for s in seeds], [0, 1, 2])
    for _ in range(30):
        d.step()
        p.step()
        time.sleep(0.002)
    assert d.job(9) is None
    sp.kill()
    d.until(lambda: d.job(9) is not None, timeout=15)
    res = d.job(9)
    assert res is not None and not res.success, res
    assert d.verdicts("d1", seeds) == [Verdict.MISS] * 3  # failed ids answer MISS: prefill locally
    # And the engine goes on: another peer still serves it.
    want = c.put(42, chunk=5)
    d.core.new_request("d2", kv_source(s3, "kv-2"))
    d.verdicts("d2", [42])
    d.until(lambda: d.verdicts("d2", [42]) == [Verdict.HIT], peers=(c,))
    d.core.submit_load(10, "d2", [key(42)], [7])
    d.until(lambda: d.job(10) is not None, peers=(c,))
    res = d.job(10)
    assert res is not None and res.success and d.region.read(7) == want


def test_own_sidecar_killed_noticed_within_a_second(sidecars: Make, engines: Callable[..., FakeEngine]) -> None:
    sp, sd = sidecars("P"), sidecars("D")
    p, d = engines(sp), engines(sd)
    d.core.new_request("d1", prefiller(sp, "kv-x"))
    pd_ready(d, "d1", 1)
    d.core.submit_load(1, "d1", [key(1)], [0])
    for _ in range(10):
        d.step()
        time.sleep(0.002)
    assert d.job(1) is None
    t0 = time.monotonic()
    sd.kill()
    deadline = t0 + 1.0
    got = None
    while time.monotonic() < deadline and got is None:
        d.step()
        got = d.job(1)
        time.sleep(0.005)
    noticed = time.monotonic() - t0
    assert got is not None and not got.success, f"job not failed {noticed:.2f}s after the kill"
    assert noticed < 1.0
    assert d.verdicts("d1", [1]) == [Verdict.MISS]
    # While the sidecar is down, new requests fall back at once.
    d.core.new_request("d2", prefiller(sp, "kv-y"))
    d.core.submit_load(2, "d2", [key(1)], [1])
    d.until(lambda: d.job(2) is not None)
    assert not d.job(2).success  # type: ignore[union-attr]
    # The sidecar returns: the client registers again and P2P works again.
    sd.start()
    d.wait_attached(5)
    assert d.core.client.registration != 0
    want = [p.put(s, c) for c, s in enumerate([5, 6])]
    p.core.new_request("p3", decoder("kv-z"))
    p.core.submit_store(3, "p3", [key(5), key(6)], [0, 1])
    d.core.new_request("d3", prefiller(sp, "kv-z"))
    pd_ready(d, "d3", 5)
    d.core.submit_load(4, "d3", [key(5), key(6)], [10, 11])
    d.until(lambda: d.job(4) is not None, peers=(p,))
    assert d.job(4).success and [d.region.read(10), d.region.read(11)] == want  # type: ignore[union-attr]


def test_mismatched_region_is_refused(sidecars: Make) -> None:
    sc = sidecars("A", num_chunks=8, configure_geometry=True)
    e = FakeEngine(sc, register_chunks=16)  # the sidecar is configured for 8
    try:
        assert not e.core.client.wait_attached(1.0)
        assert "FAILED_PRECONDITION" in e.core.client.last_error
        e.core.new_request("r", prefiller(sc, "kv"))
        e.core.submit_load(1, "r", [key(1)], [0])
        e.until(lambda: e.job(1) is not None, timeout=3)
        assert not e.job(1).success  # type: ignore[union-attr]
    finally:
        e.close()


def test_geometry_comes_from_the_first_register(sidecars: Make) -> None:
    sc = sidecars("A", num_chunks=8)  # slots, block_bytes not configured
    e = FakeEngine(sc)
    try:
        assert e.core.client.wait_attached(5.0), e.core.client.last_error
    finally:
        e.close()
    # A restarted engine must bring the geometry the sidecar took.
    e = FakeEngine(sc, register_chunks=4)
    try:
        assert not e.core.client.wait_attached(1.0)
        assert "FAILED_PRECONDITION" in e.core.client.last_error
        assert "restart the sidecar" in e.core.client.last_error
    finally:
        e.close()


def test_steps_take_the_step_socket_or_fall_back_to_grpc(sidecars: Make, engines: Callable[..., FakeEngine]) -> None:
    sa, sb = sidecars("A"), sidecars("B")
    a = engines(sa)
    c = a.core.client
    assert c.registered is not None and c.registered.step_socket == sa.socket + ".step"
    assert c.step_transport == "socket"
    assert c.step(pb.StepRequest(end_step=True)) is not None
    # Named but unreachable (here: gone): the client steps over gRPC.
    os.unlink(sb.socket + ".step")
    b = engines(sb)
    c = b.core.client
    assert c.step_transport == "grpc"
    assert c.step(pb.StepRequest(end_step=True)) is not None
    # Refusals arrive the same way on both transports.
    for e in (a, b):
        bad = pb.StepRequest(lookups=[pb.LookupBatch(req_id="r", keys=[b"short"])])
        with pytest.raises(StepRefused, match="INVALID_ARGUMENT"):
            e.core.client.step(bad)


def test_preempted_request_registers_again(sidecars: Make, engines: Callable[..., FakeEngine]) -> None:
    sa, sb = sidecars("A"), sidecars("B")
    a, b = engines(sa), engines(sb)
    want = a.put(7, chunk=3)
    b.core.new_request("r", kv_source(sa, "kv-p"))
    b.verdicts("r", [7])
    b.until(lambda: b.verdicts("r", [7]) == [Verdict.HIT], peers=(a,))
    b.core.schedule_end(preempted=["r"])  # the sidecar forgets it
    b.step()
    # Scheduled again: the plugin registers it anew and asks again.
    assert b.verdicts("r", [7]) == [Verdict.RETRY]
    b.until(lambda: b.verdicts("r", [7]) == [Verdict.HIT], peers=(a,))
    b.core.submit_load(1, "r", [key(7)], [9])
    b.until(lambda: b.job(1) is not None, peers=(a,))
    assert b.job(1).success and b.region.read(9) == want  # type: ignore[union-attr]


def test_refused_step_fails_its_jobs_only(sidecars: Make, engines: Callable[..., FakeEngine]) -> None:
    sa, sb = sidecars("A"), sidecars("B", num_chunks=8)
    a, b = engines(sa), engines(sb)
    a.put(1, chunk=0)
    b.core.new_request("r", kv_source(sa, "kv-r"))
    b.verdicts("r", [1])
    b.until(lambda: b.verdicts("r", [1]) == [Verdict.HIT], peers=(a,))
    reg = b.core.client.registration
    b.core.submit_load(1, "r", [key(1)], [8])  # chunk 8 of 8: out of range
    b.until(lambda: b.job(1) is not None, peers=(a,))
    assert not b.job(1).success  # type: ignore[union-attr]
    assert "INVALID_ARGUMENT" in b.job(1).reason  # type: ignore[union-attr]
    assert b.verdicts("r", [1]) == [Verdict.MISS]  # the request falls back
    assert b.core.client.registration == reg  # and the engine stays attached


def test_jobs_beyond_the_sidecars_limit_wait_their_turn(sidecars: Make, engines: Callable[..., FakeEngine]) -> None:
    sp, sd = sidecars("P"), sidecars("D", extra=["--set", "engine.max_jobs=2"])
    p, d = engines(sp), engines(sd)
    seeds = list(range(1, 6))
    for i in seeds:
        d.core.new_request(f"d{i}", prefiller(sp, f"kv-{i}"))
        pd_ready(d, f"d{i}", i)
    for i in seeds:  # five loads in one step; the sidecar takes two at a time
        d.core.submit_load(i, f"d{i}", [key(i)], [10 + i])
    d.step()
    want = [p.put(s, s) for s in seeds]
    for i in seeds:
        p.core.new_request(f"p{i}", decoder(f"kv-{i}"))
        p.core.submit_store(50 + i, f"p{i}", [key(i)], [i])
    d.until(lambda: all(d.job(i) is not None for i in seeds), peers=(p,))
    assert all(d.job(i).success for i in seeds), d.done  # type: ignore[union-attr]
    assert [d.region.read(10 + i) for i in seeds] == want


class _Clock:
    """A clock that moves only when the test moves it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_hung_sidecar_noticed_within_a_second(sidecars: Make, engines: Callable[..., FakeEngine]) -> None:
    """A frozen sidecar (SIGSTOP: alive, its sockets open, silent) is taken
    for gone at the first check after it has been silent for `dead_after`
    (0.75 s, the default): at most one tick period (62.5 ms) later, under a
    second from its last word. Time is the client's own clock, moved here a
    tick at a time, so what is checked is what the client decides, not how
    late a loaded machine runs this process (the ticker thread's lateness
    is test_own_stall_is_not_the_sidecars_silence's subject)."""

    clock = _Clock()
    sd = sidecars("D")
    d = engines(sd, client_opts={"clock": clock, "ticker": False})  # the default dead_after
    c = d.core.client
    reg = c.registration
    assert sd.proc is not None and c.last_heard is not None
    dead_after = c.dead_after
    sd.freeze()  # alive, silent
    try:
        frozen = clock.now  # what the sidecar sent before it stopped may be read later: last_word
        ticks = 0
        while c.silence_drop is None and ticks < 100:
            heard = c.last_heard  # the last word, as the client saw it
            assert heard is not None
            assert clock.now - heard <= dead_after, f"not dropped after {clock.now - heard:.3f}s of silence"
            clock.now += c.tick_period
            c.tick()
            ticks += 1
        assert c.silence_drop is not None, "a silent sidecar was never dropped"
        when, silence = c.silence_drop
        last_word = max(frozen, heard)  # a message in flight at the stop may be read late
        assert dead_after < silence <= dead_after + c.tick_period, silence
        assert when - last_word < 1.0, f"noticed {when - last_word:.3f}s after the sidecar's last word"
        deadline = time.monotonic() + 5
        while c.registration == reg and time.monotonic() < deadline:
            time.sleep(0.01)  # the dropped stream ends in the client's reader thread
        assert c.registration != reg, "the attachment outlived its drop"
    finally:
        sd.thaw()
    d.wait_attached(5)  # the sidecar wakes, drops the old stream; the engine registers again


def _lending(pin: int, grant_hold: float) -> TierState:
    """A tier state that lent a chunk to a peer under API pin id `pin` (a
    grant no sidecar will release), for an engine to start from."""
    st = TierState(grant_hold=grant_hold)
    st.granted(pin, 1)
    return st


def _released(d: FakeEngine) -> list[int]:
    """The pins given back so far (FakeEngine.step files them in d.done)."""
    d.done.extend(d.core.take_finished())
    return [x.job_id for x in d.done if x.kind == Kind.PIN]


def test_frozen_sidecar_keeps_lent_chunks_past_grant_hold(sidecars: Make, engines: Callable[..., FakeEngine]) -> None:
    """A sidecar frozen for longer than grant_hold may still send a lent
    chunk once it runs again: the chunk stays pinned until the sidecar has
    registered again (it refuses while an old chunk is in use), because the
    step socket named its process and that process is alive."""

    sd = sidecars("D")
    d = engines(sd, state=_lending(9, grant_hold=0.2), client_opts={"dead_after": 0.3})
    c = d.core.client
    assert sd.proc is not None and c.sidecar is not None and c.sidecar.pid == sd.proc.pid
    assert d.core.lent() == 1
    reg = c.registration
    sd.freeze()
    try:
        deadline = time.monotonic() + 10
        while c.registration == reg and time.monotonic() < deadline:
            time.sleep(0.01)
        assert c.registration != reg, "the frozen sidecar was not dropped"
        lost = time.monotonic()
        while time.monotonic() - lost < 1.0:  # five grant_holds; the worker checks every 0.1 s
            assert not _released(d), "a lent chunk was released while its sidecar may still send it"
            time.sleep(0.05)
        assert d.core.has_pending_work()
    finally:
        sd.thaw()
    d.wait_attached(10)  # the sidecar wakes, drops the old stream; the engine registers again
    d.until(lambda: bool(_released(d)))
    assert _released(d) == [8]


def test_killed_sidecar_frees_lent_chunks_at_once(sidecars: Make, engines: Callable[..., FakeEngine]) -> None:
    """A sidecar whose process has exited reads nothing: its lent chunks
    come back as soon as its loss is noticed, not after grant_hold."""
    sd = sidecars("D")
    d = engines(sd, state=_lending(9, grant_hold=60.0))
    assert d.core.client.sidecar is not None and d.core.lent() == 1
    sd.kill()  # SIGKILL, and reaped
    d.until(lambda: bool(_released(d)), timeout=10)
    assert _released(d) == [8]


def test_own_stall_is_not_the_sidecars_silence(sidecars: Make, engines: Callable[..., FakeEngine]) -> None:
    import sys

    d = engines(sidecars("D"), client_opts={})  # the default silence limit
    reg = d.core.client.registration
    old = sys.getswitchinterval()
    sys.setswitchinterval(5.0)  # this thread keeps the GIL: every other thread of the engine stalls
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.5:
            pass
    finally:
        sys.setswitchinterval(old)
    time.sleep(0.3)
    assert d.core.client.registration == reg, d.core.client.last_error
