"""Kvp2pTier under vLLM's whole v1 Scheduler and OffloadingConnector, on
CPU: two engine processes, each with its /dev/shm CPU region and its own
`kvp2p serve`. Only the model and the GPU side of the offloading worker
are emulated (kvp2p.testing.vllm_scheduler)."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator

import pytest

from kvp2p.testing import Sidecar

if os.environ.get("KVP2P_VLLM") == "0":
    pytest.skip("KVP2P_VLLM=0: the vLLM tests are off", allow_module_level=True)
if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed (scripts/pyenv.sh --vllm installs vllm==0.33.0)", allow_module_level=True)

from kvp2p.testing.vllm_harness import EngineProc  # noqa: E402

NUM_CHUNKS = 32
ROW_STRIDE = 8192  # the tiny model's block: 2 layers x 16 tokens x 4 heads x 16 x fp16 x (K, V)
PROMPT_BLOCKS = 4


def prompt(seed: int) -> list[int]:
    """Four full blocks and one token: the four blocks can come from outside."""
    return [(seed * 131 + i) % 997 + 1 for i in range(PROMPT_BLOCKS * 16 + 1)]


def role(sc: Sidecar, name: str, kv: str) -> dict[str, object]:
    return {name: {"remote_host": "127.0.0.1", "remote_port": sc.port, "kv_request_id": kv}}


Pair = tuple[Sidecar, EngineProc, Sidecar, EngineProc]


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    tag = f"kvp2p-sched-{os.getpid()}"
    scs = [Sidecar(f"{tag}-{n}", NUM_CHUNKS, ROW_STRIDE, region_dir="/dev/shm") for n in "AB"]
    engines: list[EngineProc] = []
    try:
        for sc in scs:
            sc.start()
        for sc in scs:
            # A tolerant silence limit: the test machine is shared (a crash is noticed at once anyway).
            engines.append(EngineProc.start(sc.name, sc.socket, NUM_CHUNKS, ROW_STRIDE, kind="scheduler",
                                            tier_opts={"dead_after_s": 3.0}))
        yield scs[0], engines[0], scs[1], engines[1]
    finally:
        for e in engines:
            e.close()
        for sc in scs:
            sc.stop()


def test_geometry_and_attachment(pair: Pair) -> None:
    sa, a, sb, b = pair
    for e in (a, b):
        info = e.call("info")
        assert info["tier"] == "kvp2p.vllm.Kvp2pTier" and info["registration"] > 0
        assert (info["num_chunks"], info["row_stride"]) == (NUM_CHUNKS, ROW_STRIDE)


def test_symmetric_prefix_loaded_from_peer(pair: Pair) -> None:
    sa, a, sb, b = pair
    p = prompt(1)
    ra = a.call("run", "a-sym", p, None)
    assert ra["finished"] and ra["external_tokens"] == 0
    rb = b.call("run", "b-sym", p, role(sa, "remote_kv_source", "kv-sym"))
    assert rb["finished"], rb
    assert rb["external_tokens"] == PROMPT_BLOCKS * 16, rb  # the prefix came from A
    assert rb["loaded_ok"] == [True] * PROMPT_BLOCKS, rb  # the bytes are A's


def test_symmetric_unknown_prefix_prefills_locally(pair: Pair) -> None:
    sa, a, sb, b = pair
    rb = b.call("run", "b-unknown", prompt(2), role(sa, "remote_kv_source", "kv-unknown"))
    assert rb["finished"] and rb["external_tokens"] == 0 and rb["loaded_ok"] == [], rb


@pytest.mark.parametrize("order", ["store-before-fetch", "fetch-before-store"])
def test_pd(order: str, pair: Pair) -> None:
    sa, a, sb, b = pair
    seed = 3 if order == "store-before-fetch" else 4
    p, kv = prompt(seed), f"kv-pd-{seed}"
    if order == "store-before-fetch":
        assert a.call("run", f"a-{kv}", p, {"remote_decoder": {"kv_request_id": kv}})["finished"]
        rb = b.call("run", f"b-{kv}", p, role(sa, "remote_prefiller", kv))
    else:
        b.send("run", f"b-{kv}", p, role(sa, "remote_prefiller", kv))  # waits at A for the prefill
        assert not b.conn.poll(0.5)
        assert a.call("run", f"a-{kv}", p, {"remote_decoder": {"kv_request_id": kv}})["finished"]
        rb = b.result("run")
    assert rb["finished"] and rb["external_tokens"] == PROMPT_BLOCKS * 16, rb
    assert rb["loaded_ok"] == [True] * PROMPT_BLOCKS, rb


def test_source_killed_mid_load_falls_back(pair: Pair) -> None:
    sa, a, sb, b = pair
    p = prompt(5)
    b.send("run", "b-kill", p, role(sa, "remote_prefiller", "kv-never"))  # its load waits at A
    assert not b.conn.poll(0.5)
    sa.kill()
    rb = b.result("run")
    # The load failed: vLLM recomputed the prompt locally and went on.
    assert rb["finished"] and rb["loaded_ok"] == [] and rb["external_tokens"] == 0, rb
    sa.start()
