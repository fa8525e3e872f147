"""Kvp2pTier inside vLLM's real tiering manager (scheduler side, CPU): two
engines in two processes, each with its /dev/shm CPU region and its own
`kvp2p serve` sidecar. See kvp2p.testing.vllm_harness for what of vLLM runs for
real and what is replayed from its scheduler's source."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Iterator

import pytest

from kvp2p.testing import Sidecar

if os.environ.get("KVP2P_VLLM") == "0":
    pytest.skip("KVP2P_VLLM=0: the vLLM tests are off (scripts/test-python.sh without it installs "
                "vllm==0.33.0 and runs them)", allow_module_level=True)
if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed in this environment (scripts/pyenv.sh --vllm installs "
                "vllm==0.33.0; scripts/test-python.sh does unless KVP2P_VLLM=0)", allow_module_level=True)

from kvp2p.testing.vllm_harness import EngineProc, block_bytes  # noqa: E402

NUM_CHUNKS, ROW_STRIDE = 64, 16384


def kv_source(sc: Sidecar, kv_id: str) -> dict[str, object]:
    return {"remote_kv_source": {"remote_host": "127.0.0.1", "remote_port": sc.port, "kv_request_id": kv_id}}


def prefiller(sc: Sidecar, kv_id: str) -> dict[str, object]:
    return {"remote_prefiller": {"remote_host": "127.0.0.1", "remote_port": sc.port, "kv_request_id": kv_id}}


def decoder(kv_id: str) -> dict[str, object]:
    return {"remote_decoder": {"kv_request_id": kv_id}}


Pair = tuple[Sidecar, EngineProc, Sidecar, EngineProc]


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    """Engines A and B, each a vLLM scheduler process with its sidecar."""
    tag = f"kvp2p-pytest-{os.getpid()}"
    scs = [Sidecar(f"{tag}-{n}", NUM_CHUNKS, ROW_STRIDE, region_dir="/dev/shm") for n in "AB"]
    engines: list[EngineProc] = []
    try:
        for sc in scs:
            sc.start()
        for sc in scs:
            engines.append(EngineProc.start(sc.name, sc.socket, NUM_CHUNKS, ROW_STRIDE))
        yield scs[0], engines[0], scs[1], engines[1]
    finally:
        for e in engines:
            e.close()
        for sc in scs:
            sc.stop()


def bytes_of(seeds: list[int]) -> list[bytes]:
    return [block_bytes(s, ROW_STRIDE) for s in seeds]


def phases(history: list[list[str]]) -> list[str]:
    """The manager's verdicts for the first block, step after step, without repeats."""
    out: list[str] = []
    for h in history:
        if not out or out[-1] != h[0]:
            out.append(h[0])
    return out


def test_loaded_through_vllm(pair: Pair) -> None:
    sa, a, sb, b = pair
    assert a.info["tier"] == "kvp2p.vllm.Kvp2pTier"
    assert a.info["num_chunks"] == NUM_CHUNKS and a.info["row_stride"] == ROW_STRIDE
    assert a.call("info")["registration"] > 0 and b.call("info")["registration"] > 0


def test_symmetric_retry_hit_and_bytes(pair: Pair) -> None:
    sa, a, sb, b = pair
    seeds = [101, 102, 103, 104]
    a.call("store", "a-sym", None, seeds)  # A computed the blocks; they sit in its CPU region
    r = b.call("fetch", "b-sym", kv_source(sa, "kv-sym"), seeds, 20.0)
    assert r["outcome"] == "hit", r
    # Kvp2pTier's RETRY while A is asked, then HIT: the manager promotes
    # (HIT_PENDING) and, once the load is done, the CPU tier HITs.
    assert phases(r["history"]) == ["RETRY", "HIT_PENDING", "HIT"], r["history"]
    assert r["data"] == bytes_of(seeds)
    a.call("finish", "a-sym")
    # A cache reset right after serving: drain_jobs waits for the pins the
    # peer's load used, then vLLM's manager finds no job left (it asserts so).
    assert a.call("reset") < 5.0
    assert b.call("reset") < 5.0


def test_symmetric_block_still_being_stored_is_waited_for(pair: Pair) -> None:
    sa, a, sb, b = pair
    seeds = [151, 152]
    a.call("store_begin", "a-pend", None, seeds)  # A's GPU->CPU store is in flight: HIT_PENDING at A
    b.send("fetch", "b-pend", kv_source(sa, "kv-pend"), seeds, 20.0)
    _wait(lambda: a.call("parked") > 0)  # B's ask reached A while the store is in flight
    a.call("store_end", "a-pend")
    r = b.result("fetch")
    assert r["outcome"] == "hit", r  # as vLLM's P2P server, A waited for the block instead of MISS
    assert r["data"] == bytes_of(seeds)
    a.call("finish", "a-pend")


def test_symmetric_unknown_block_misses(pair: Pair) -> None:
    sa, a, sb, b = pair
    r = b.call("fetch", "b-miss", kv_source(sa, "kv-miss"), [999], 20.0)
    assert r["outcome"] == "miss" and phases(r["history"]) == ["RETRY", "MISS"], r


@pytest.mark.parametrize("order", ["store-before-fetch", "fetch-before-store"])
def test_pd(order: str, pair: Pair) -> None:
    sa, a, sb, b = pair
    seeds = [200 + i for i in range(8)] if order == "store-before-fetch" else [300 + i for i in range(8)]
    kv = f"kv-pd-{order}"
    if order == "store-before-fetch":
        a.call("store", f"a-{kv}", decoder(kv), seeds)
        a.call("finish", f"a-{kv}")  # the prefill ends; its blocks wait for the decoder
        r = b.call("fetch", f"b-{kv}", prefiller(sa, kv), seeds, 20.0)
    else:
        r = b.call("fetch", f"b-{kv}", prefiller(sa, kv), seeds, 20.0, True)
        assert r["outcome"] == "pending", r  # the load waits at A for the prefill
        a.call("store", f"a-{kv}", decoder(kv), seeds)
        a.call("finish", f"a-{kv}")
        r = b.call("fetch", f"b-{kv}", None, seeds, 20.0)
    assert r["outcome"] == "hit", r
    assert r["data"] == bytes_of(seeds)


def test_source_sidecar_killed_mid_load(pair: Pair) -> None:
    sa, a, sb, b = pair
    seeds = [400, 401, 402]
    # B's load from A is in flight (A has not prefilled yet) when A's
    # sidecar dies.
    r = b.call("fetch", "b-kill", prefiller(sa, "kv-kill"), seeds, 20.0, True)
    assert r["outcome"] == "pending", r
    sa.kill()
    r = b.call("fetch", "b-kill", None, seeds, 20.0)
    # The load failed: the blocks answer MISS and vLLM prefills locally.
    assert r["outcome"] == "miss", r
    assert phases(r["history"])[-1] == "MISS"
    # B goes on: A's sidecar returns, A's engine registers again by itself,
    # and B loads from it.
    sa.start()
    _wait(lambda: a.call("info")["registration"] > 0)
    seeds2 = [410, 411]
    a.call("store", "a-after", None, seeds2)
    r = b.call("fetch", "b-after", kv_source(sa, "kv-after"), seeds2, 20.0)
    assert r["outcome"] == "hit", r
    assert r["data"] == bytes_of(seeds2)
    a.call("finish", "a-after")


def _wait(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_own_sidecar_killed_mid_load(pair: Pair) -> None:
    import time

    sa, a, sb, b = pair
    r = b.call("fetch", "b-own", prefiller(sa, "kv-own"), [500], 20.0, True)
    assert r["outcome"] == "pending", r  # B's load waits at A
    sb.kill()
    t0 = time.monotonic()
    r = b.call("fetch", "b-own", None, [500], 20.0)
    assert r["outcome"] == "miss", r  # the job failed: vLLM prefills locally
    assert time.monotonic() - t0 < 2.0  # noticed within a second (plus this call's own overhead)
    sb.start()
    _wait(lambda: b.call("info")["registration"] > 0)  # B's plugin registered again by itself
    a.call("store", "a-own2", None, [510])
    r = b.call("fetch", "b-own2", kv_source(sa, "kv-own2"), [510], 20.0)
    assert r["outcome"] == "hit" and r["data"] == bytes_of([510]), r
    a.call("finish", "a-own2")
    # vLLM's metrics path: B's loss and its failed steps are counted, A
    # counts the chunks it pinned for B.
    vb, va = b.call("stats")["values"], a.call("stats")["values"]
    assert vb.get("vllm:kvp2p_sidecar_lost", 0) >= 1 and vb.get("vllm:kvp2p_steps", 0) > 0, vb
    assert va.get("vllm:kvp2p_served_chunks", 0) >= 1, va


def test_metrics_declared_through_vllm(pair: Pair) -> None:
    sa, a, sb, b = pair
    s = a.call("stats")
    assert s["defined"] == ["vllm:kvp2p_served_chunks", "vllm:kvp2p_sidecar_attached", "vllm:kvp2p_sidecar_lost",
                            "vllm:kvp2p_step_failures", "vllm:kvp2p_steps"], s
