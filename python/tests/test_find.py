"""Finding a source for a request that names none (docs/find.md), pure:
the summary hash against Go's test vectors, the mirror of the peers'
summaries, and TierState's unnamed lookups, driven as the scheduler and
the worker would (no threads, no sockets)."""

from __future__ import annotations

import numpy as np
import pytest

from kvp2p._pb import engine_pb2 as pb
from kvp2p.bloom import position
from kvp2p.summaries import FORMAT, SummaryMirror
from kvp2p.testing.summaries import filter_of, pack, random_filter, size_words, snapshot
from kvp2p.tierstate import END_RUN, MIN_RUN, TierState, Verdict, peer_id, source_of

SIZE = 1024


def keys_of(tag: int, n: int) -> list[bytes]:
    return [bytes([tag, i]) * 8 for i in range(n)]


def mirror_with(held: dict[str, list[bytes]]) -> SummaryMirror:
    m = SummaryMirror()
    for peer, keys in held.items():
        for u in snapshot(peer, filter_of(keys, SIZE)):
            assert m.apply(u, 0.0)
    return m


def test_position_matches_gos_vectors() -> None:
    # docs/find.md, "The summary" (Go: TestPositionVectors).
    assert position(bytes(16), 1024) == ((431, 0x0610080000000820), (57, 0x0040002802110000))
    assert position(bytes(range(16)), 1024) == ((259, 0x8000800A00220000), (592, 0x0000410000200230))
    assert position(bytes(range(16)), 1 << 20) == ((592131, 0x8000800A00220000), (547408, 0x0000410000200230))


def test_filters_for_benchmarks() -> None:
    # Go's summary.SizeWords: 32 bits a chunk, a power of two words.
    assert [size_words(c) for c in (1, 2, 3, 8192, 10000)] == [1, 1, 2, 4096, 8192]
    # random_filter is filter_of(random keys) in distribution: about as
    # many bits set (8,192 keys in 4,096 words: 79,500 of 262,144).
    rng = np.random.default_rng(3)
    keys = [bytes(k) for k in rng.integers(0, 256, (8192, 16), dtype=np.uint8)]
    hashed, drawn = filter_of(keys, 4096), random_filter(8192, 4096, rng)
    ones = [sum(bin(int(x)).count("1") for x in w) for w in (hashed, drawn)]
    assert abs(ones[0] - ones[1]) < 1000, ones


def test_mirror_applies_snapshots_and_deltas_in_order() -> None:
    m = SummaryMirror(max_age=3.0)
    a, b = keys_of(1, 4), keys_of(2, 4)
    parts = snapshot("a:1", filter_of(a, SIZE), per_part=2, seq=7)
    assert len(parts) > 1
    for u in parts[:-1]:
        assert m.apply(u, 1.0)
        assert not m.usable("a:1") and m.holders(a[0]) == []  # not whole yet
    assert m.apply(parts[-1], 1.0)
    assert m.usable("a:1") and all(m.holds("a:1", k) for k in a)
    assert m.holders(a[0]) == ["a:1"]
    # A delta: b's words, as values, on top of seq 7.
    w = filter_of(a + b, SIZE)
    delta = pb.SummaryUpdate(peer="a:1", format=FORMAT, last=True, epoch=1, seq=8, size=SIZE,
                             words_packed=pack(w, np.flatnonzero(w != filter_of(a, SIZE))))
    assert m.apply(delta, 2.0)
    assert all(m.holds("a:1", k) for k in a + b)
    # A gap (seq 10 after 8) leaves the peer out until a snapshot.
    gap = pb.SummaryUpdate(peer="a:1", format=FORMAT, last=True, epoch=1, seq=10, size=SIZE)
    assert not m.apply(gap, 3.0)
    assert not m.usable("a:1") and m.holders(a[0]) == []
    later = pb.SummaryUpdate(peer="a:1", format=FORMAT, last=True, epoch=1, seq=11, size=SIZE)
    assert not m.apply(later, 3.0)
    for u in snapshot("a:1", filter_of(a, SIZE), epoch=2, seq=1):
        assert m.apply(u, 3.0)
    assert m.usable("a:1") and all(m.holds("a:1", k) for k in a)
    assert m.counts.refused == 2


def test_mirror_refuses_bad_parts_and_forgets_gone_peers() -> None:
    m = mirror_with({"a:1": keys_of(1, 3)})
    bad = [
        pb.SummaryUpdate(peer="x:1", format=1, reset=True, last=True, size=SIZE),  # one word a key: not read
        pb.SummaryUpdate(peer="x:1", format=FORMAT, reset=True, last=True, size=1000),  # not a power of two
        pb.SummaryUpdate(peer="x:1", format=FORMAT, reset=True, last=True, size=1 << 30),
        pb.SummaryUpdate(peer="x:1", format=FORMAT, reset=True, last=True, size=SIZE, words_packed=b"\x00" * 11),
        pb.SummaryUpdate(peer="x:1", format=FORMAT, reset=True, last=True, size=8,
                         words_packed=pack(np.ones(16, np.uint64), np.array([9]))),  # word 9 of 8
    ]
    assert [m.apply(u, 0.0) for u in bad] == [False] * len(bad)
    assert m.peers() == ["a:1"]
    assert m.apply(pb.SummaryUpdate(peer="a:1", gone=True), 0.0)
    assert m.peers() == [] and len(m) == 0 and m.holders(keys_of(1, 1)[0]) == []


def test_mirror_stops_using_a_summary_not_updated_for_max_age() -> None:
    m = SummaryMirror(max_age=3.0)
    a = keys_of(1, 3)
    for u in snapshot("a:1", filter_of(a, SIZE)):
        m.apply(u, 10.0)
    m.advance(13.0)
    assert m.holders(a[0]) == ["a:1"]
    m.advance(13.5)
    assert m.holders(a[0]) == [] and not m.holds("a:1", a[0])
    # An empty delta proves it fresh again.
    m.apply(pb.SummaryUpdate(peer="a:1", format=FORMAT, last=True, epoch=1, seq=2, size=SIZE), 13.5)
    assert m.holders(a[0]) == ["a:1"]


def test_mirror_stacks_many_peers_and_reuses_rows() -> None:
    held = {f"p{i}:1": keys_of(i, 3) for i in range(40)}
    m = mirror_with(held)
    for peer, keys in held.items():
        assert peer in m.holders(keys[0])
        assert all(m.holds(peer, k) for k in keys)
    m.apply(pb.SummaryUpdate(peer="p3:1", gone=True), 0.0)
    assert "p3:1" not in m.holders(held["p3:1"][0])
    for u in snapshot("new:1", filter_of(keys_of(99, 3), SIZE)):
        m.apply(u, 0.0)
    assert m.holders(keys_of(99, 3)[0]) == ["new:1"] and len(m) == 40
    # Another filter size is another stack.
    for u in snapshot("big:1", filter_of(keys_of(98, 3), 4 * SIZE)):
        m.apply(u, 0.0)
    assert m.holders(keys_of(98, 3)[0]) == ["big:1"]


def test_peer_ids_and_sources() -> None:
    assert peer_id("10.0.0.7", 7777) == "10.0.0.7:7777"
    assert peer_id("::1", 7777) == "[::1]:7777"
    s = source_of("[::1]:7777", "r")
    assert s is not None and (s.host, s.port, s.kv_request_id, s.pd) == ("::1", 7777, "r", False)
    assert source_of("nope", "r") is None and source_of("h:0", "r") is None and source_of("h:x", "r") is None


def test_no_summaries_or_no_holder_misses_at_once() -> None:
    """A request nobody holds answers MISS at its first lookup and adds
    nothing to the next Step: it is what an engine without summaries
    sends (the request's registration)."""
    k = keys_of(1, 5)
    steps = []
    for st in (TierState(), TierState(mirror=mirror_with({f"p{i}:1": keys_of(i + 10, 5) for i in range(20)}))):
        st.new_request("r", None)
        assert st.lookup("r", k[0]) == Verdict.MISS
        st.schedule_end()
        step = st.next_step(None)
        assert step is not None and not step.asked
        steps.append(step.request)
    assert steps[0] == steps[1]


def test_found_source_is_asked_as_a_named_one() -> None:
    """Three keys in a row in a's summary: the request registers with a as
    remote_kv_source, its keys are asked, and a's answer decides."""
    k = keys_of(1, 6)
    st = TierState(mirror=mirror_with({"10.0.0.7:7777": k[:5], "10.0.0.9:7777": keys_of(2, 5)}))
    st.new_request("r", None)
    assert [st.lookup("r", x) for x in k] == [Verdict.RETRY] * 6
    st.schedule_end()
    step = st.next_step(None)
    assert step is not None
    # Registered at new_request with no role, then again with its source.
    nr = list(step.request.new_requests)
    assert [n.req_id for n in nr] == ["r", "r"] and not nr[0].params.HasField("remote_kv_source")
    src = nr[1].params.remote_kv_source
    assert (src.host, src.port, src.kv_request_id) == ("10.0.0.7", 7777, "r")
    assert step.asked == {"r": k}  # the keys its pass saw, and the rest as a named source's
    verdicts = bytes([pb.VERDICT_HIT] * 5 + [pb.VERDICT_MISS])
    st.apply(step, pb.StepResponse(lookups=[pb.LookupAnswer(req_id="r", verdicts_packed=verdicts)]))
    st.schedule_end()
    assert [st.lookup("r", x) for x in k] == [Verdict.HIT] * 5 + [Verdict.MISS]
    st.submit_load(0, "r", k[:5], [0, 1, 2, 3, 4])
    assert st.take_finished() == []  # a load, as for a named source
    assert st.take_counts() == {"found_sources": 1, "steps": 1}


def test_a_short_run_is_no_source_and_misses_from_then_on() -> None:
    """A summary holding the first key only (a false positive): the pass
    stops at the second key, and the request answers MISS at once after."""
    k = keys_of(1, 5)
    st = TierState(mirror=mirror_with({"a:1": k[:MIN_RUN - 1]}))
    st.new_request("r", None)
    got = [st.lookup("r", x) for x in k[:MIN_RUN]]
    assert got == [Verdict.RETRY] * (MIN_RUN - 1) + [Verdict.MISS]
    st.schedule_end()
    assert st.lookup("r", k[0]) == Verdict.MISS
    st.schedule_end()
    step = st.next_step(None)
    assert step is not None and not step.asked
    assert [n.params.HasField("remote_kv_source") for n in step.request.new_requests] == [False]
    st.request_finished("r")
    assert not st.holds("r")


def test_a_pass_that_ends_short_of_the_run_finds_no_source() -> None:
    """The pass ends (the request's keys ran out, or vLLM cut it short)
    after fewer than END_RUN keys: no source is chosen, even if a summary
    holds them all, and the request answers MISS from then on."""
    k = keys_of(1, END_RUN - 1)
    st = TierState(mirror=mirror_with({"a:1": k}))
    st.new_request("r", None)
    assert [st.lookup("r", x) for x in k] == [Verdict.RETRY] * len(k)
    st.schedule_end()
    assert [st.lookup("r", x) for x in k] == [Verdict.MISS] * len(k)
    st.schedule_end()
    step = st.next_step(None)
    assert step is not None and not step.asked
    assert [n.params.HasField("remote_kv_source") for n in step.request.new_requests] == [False]
    assert st.take_counts() == {}


@pytest.mark.parametrize("n", [END_RUN, MIN_RUN])
def test_a_pass_that_ends_on_the_run_finds_its_holder(n: int) -> None:
    """A pass that ends after END_RUN keys or more (the request's last keys)
    chooses a source, though a run that short in the middle would not."""
    k = keys_of(1, n)
    st = TierState(mirror=mirror_with({"a:1": k, "b:1": k}))  # two candidates to the end
    st.new_request("r", None)
    assert [st.lookup("r", x) for x in k] == [Verdict.RETRY] * n
    st.schedule_end()  # the request's keys ran out: a and b hold them all
    step = st.next_step(None)
    assert step is not None and step.asked == {"r": k}
    assert step.request.new_requests[-1].params.remote_kv_source.host == "a"


def test_the_longest_prefix_then_the_least_loaded_wins() -> None:
    k = keys_of(1, 8)
    st = TierState(mirror=mirror_with({"a:1": k[:4], "b:1": k[:6], "c:1": k[:6]}))
    # c is loaded by a request naming it; b and c hold the longest prefix.
    st.new_request("named", {"remote_kv_source": {"remote_host": "c", "remote_port": 1, "kv_request_id": "x"}})
    st.new_request("r", None)
    got = [st.lookup("r", x) for x in k]
    assert got[:6] == [Verdict.RETRY] * 6
    st.schedule_end()
    step = st.next_step(None)
    assert step is not None
    srcs = {n.req_id: n.params.remote_kv_source.host for n in step.request.new_requests}  # the last one
    assert srcs == {"named": "c", "r": "b"}
    assert step.asked["r"][:7] == k[:7]


def test_a_found_source_fails_as_a_named_one() -> None:
    k = keys_of(1, 3)
    st = TierState(mirror=mirror_with({"a:1": k}))
    st.new_request("r", None)
    assert [st.lookup("r", x) for x in k] == [Verdict.RETRY] * 3
    st.schedule_end()
    step = st.next_step(None)
    assert step is not None
    st.step_failed(step, "sidecar unavailable: test", "unavailable")
    assert st.lookup("r", k[0]) == Verdict.MISS
    st.submit_load(0, "r", k, [0, 1, 2])
    assert [(d.job_id, d.success) for d in st.take_finished()] == [(0, False)]


def test_a_remote_decoder_request_finds_no_source() -> None:
    k = keys_of(1, 3)
    st = TierState(mirror=mirror_with({"a:1": k}))
    st.new_request("p", {"remote_decoder": {"kv_request_id": "x"}})
    assert st.lookup("p", k[0]) == Verdict.MISS


def test_stores_and_loads_are_reported_stored() -> None:
    st = TierState()
    k = keys_of(1, 4)
    st.submit_store(0, "s", k[:2], [5, 6])  # a plain store: done at once, reported
    assert [(d.job_id, d.success) for d in st.take_finished()] == [(0, True)]
    step = st.next_step(None)
    assert step is not None
    assert step.request.stored.keys_packed == b"".join(k[:2]) and list(step.request.stored.chunk_ids) == [5, 6]
    st.apply(step, pb.StepResponse())
    # A load from a peer that succeeded in part: its loaded keys are reported.
    st.new_request("r", {"remote_kv_source": {"remote_host": "h", "remote_port": 1, "kv_request_id": "x"}})
    st.submit_load(1, "r", k[2:], [7, 8])
    step = st.next_step(None)
    assert step is not None and not step.request.HasField("stored")
    st.apply(step, pb.StepResponse(finished=[pb.JobDone(job_id=2, kind=pb.JOB_KIND_LOAD, success=False,
                                                         successful=[1])]))
    step = st.next_step(None)
    assert step is not None
    assert step.request.stored.keys_packed == k[3] and list(step.request.stored.chunk_ids) == [8]
    # Find off in the sidecar: nothing is reported.
    st.set_find(False)
    st.submit_store(2, "s", k[:1], [9])
    st.take_finished()
    assert st.next_step(None) is None


def test_stored_report_of_a_failed_step_is_sent_again() -> None:
    st = TierState()
    k = keys_of(1, 3)
    st.submit_store(0, "s", k[:2], [5, 6])
    step = st.next_step(None)
    assert step is not None
    st.submit_store(1, "s", k[2:], [5])  # chunk 5 stored again, with another key, after the Step left
    st.step_failed(step, "sidecar unavailable: test", "unavailable")
    again = st.next_step(None)
    assert again is not None
    # The failed report first, then the newer store: chunk 5 ends with k[2].
    assert again.request.stored.keys_packed == b"".join([k[0], k[1], k[2]])
    assert list(again.request.stored.chunk_ids) == [5, 6, 5]
    # A refused Step's report is not sent again.
    st.step_failed(again, "refused: test", "refused")
    assert st.next_step(None) is None


def test_stored_reports_keep_within_the_step_limit() -> None:
    st = TierState()
    k = keys_of(1, 10)
    st.submit_store(0, "s", k, list(range(10)))
    reg = pb.Registered(max_keys_per_step=4)
    sent: list[int] = []
    while (step := st.next_step(reg)) is not None:
        assert len(step.request.stored.chunk_ids) <= 4
        sent += list(step.request.stored.chunk_ids)
        st.apply(step, pb.StepResponse())
    assert sent == list(range(10))
