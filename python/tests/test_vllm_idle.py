"""An idle producer engine, as vLLM's EngineCore idles: once it has no work
it blocks on its input queue (the harness's idle="block"). On vLLM 0.33 the
manager's tier-poll thread serves a peer's ask meanwhile; vLLM 0.32 has no
such thread, so the ask waits for the producer's next step: the peer's
lookup RETRYs for the producer sidecar's engine.serve_timeout, then MISSes,
and the peer prefills locally, with nothing left pinned or in flight. This
is the stated consequence on 0.32 (docs/vllm-versions.md), measured here."""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Iterator

import pytest

from kvp2p.testing import Sidecar

if os.environ.get("KVP2P_VLLM") == "0":
    pytest.skip("KVP2P_VLLM=0: the vLLM tests are off", allow_module_level=True)
if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed in this environment (scripts/pyenv.sh --vllm)", allow_module_level=True)

from kvp2p.vllm import OFF_THREAD_POLLING  # noqa: E402
from kvp2p.testing.vllm_harness import EngineProc, block_bytes  # noqa: E402

NUM_CHUNKS, ROW_STRIDE = 32, 16384
SERVE_TIMEOUT = 0.5  # the producer sidecar's engine.serve_timeout, seconds: its shipped default

Pair = tuple[Sidecar, EngineProc, Sidecar, EngineProc]


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    """A (the producer) idles as vLLM does; B steps while it has work."""
    tag = f"kvp2p-idle-{os.getpid()}"
    scs = [Sidecar(f"{tag}-{n}", NUM_CHUNKS, ROW_STRIDE, region_dir="/dev/shm") for n in "AB"]
    engines: list[EngineProc] = []
    try:
        for sc in scs:
            sc.start()
        for sc, idle in zip(scs, ("block", "poll")):
            engines.append(EngineProc.start(sc.name, sc.socket, NUM_CHUNKS, ROW_STRIDE, idle=idle,
                                            tier_opts={"serve_wait_s": 0.2, "dead_after_s": 3.0}))
        yield scs[0], engines[0], scs[1], engines[1]
    finally:
        for e in engines:
            e.close()
        for sc in scs:
            sc.stop()


def kv_source(sc: Sidecar, kv_id: str) -> dict[str, object]:
    return {"remote_kv_source": {"remote_host": "127.0.0.1", "remote_port": sc.port, "kv_request_id": kv_id}}


def phases(history: list[list[str]]) -> list[str]:
    out: list[str] = []
    for h in history:
        if not out or out[-1] != h[0]:
            out.append(h[0])
    return out


def test_idle_producer(pair: Pair) -> None:
    sa, a, sb, b = pair
    seeds = [701, 702, 703]
    a.call("store", "a-idle", None, seeds)
    a.call("finish", "a-idle")
    time.sleep(1.0)  # A's last work settles; then its EngineCore blocks, waiting for input
    t0 = time.monotonic()
    r = b.call("fetch", "b-idle", kv_source(sa, "kv-idle"), seeds, 30.0)
    waited = time.monotonic() - t0
    if OFF_THREAD_POLLING:
        # vLLM 0.33: the tier-poll thread served B while A's engine slept.
        assert r["outcome"] == "hit", r
        assert r["data"] == [block_bytes(s, ROW_STRIDE) for s in seeds]
        # (A HIT at all means A's tier granted within A's serve timeout.)
        return
    # vLLM 0.32: nobody answers A's ask until A steps. B's lookup RETRYs for
    # A's serve timeout, then MISSes: B prefills locally (no load started).
    assert r["outcome"] == "miss" and phases(r["history"]) == ["RETRY", "MISS"], r
    assert SERVE_TIMEOUT <= waited < SERVE_TIMEOUT + 3.0, f"B waited {waited:.2f}s"
    print(f"vLLM 0.32, idle producer: B's request waited {waited:.3f}s (serve_timeout {SERVE_TIMEOUT}s), then MISS")
    # A's next step answers the expired ask late: its sidecar gives the pin
    # back at once, so nothing stays pinned.
    a.call("step_once")
    deadline = time.monotonic() + 10.0
    while a.call("grants") and time.monotonic() < deadline:
        a.call("step_once")
        time.sleep(0.01)
    assert a.call("grants") == 0
    # A's sidecar remembers for 100 ms (engine.go's missMemory) that its
    # engine did not answer for these keys; past that it asks again.
    time.sleep(0.3)
    # While A steps (busy with other requests, here empty steps), B is served.
    b.send("fetch", "b-busy", kv_source(sa, "kv-busy"), seeds, 30.0)
    deadline = time.monotonic() + 30.0
    while not b.conn.poll(0) and time.monotonic() < deadline:
        a.call("step_once")
        time.sleep(0.005)
    r = b.result("fetch")
    assert r["outcome"] == "hit" and r["data"] == [block_bytes(s, ROW_STRIDE) for s in seeds], r


@pytest.mark.skipif(OFF_THREAD_POLLING, reason="vLLM 0.33 serves peers from its tier-poll thread: idle_serve_s "
                    "is ignored there (test_idle_producer covers it)")
def test_idle_serve_window_on_032() -> None:
    """vLLM 0.32 with idle_serve_s: the producer keeps stepping that long
    after its last request, serving peers; after it, it idles as before."""
    tag = f"kvp2p-idlewin-{os.getpid()}"
    window = 4.0
    scs = [Sidecar(f"{tag}-{n}", NUM_CHUNKS, ROW_STRIDE, region_dir="/dev/shm") for n in "AB"]
    engines: list[EngineProc] = []
    try:
        for sc in scs:
            sc.start()
        for sc, idle, opts in zip(scs, ("block", "poll"), ({"idle_serve_s": window}, {})):
            engines.append(EngineProc.start(sc.name, sc.socket, NUM_CHUNKS, ROW_STRIDE, idle=idle,
                                            tier_opts={"serve_wait_s": 0.2, "dead_after_s": 3.0, **opts}))
        sa, a, b = scs[0], engines[0], engines[1]
        seeds, later = [801, 802], [803, 804]  # B's own CPU tier keeps what it loaded: ask for new blocks later
        t_store = time.monotonic()
        a.call("store", "a-win", None, seeds + later)
        a.call("finish", "a-win")  # A's last request activity: the window runs from here
        time.sleep(1.0)  # idle, inside the window
        r = b.call("fetch", "b-win", kv_source(sa, "kv-win"), seeds, 30.0)
        assert time.monotonic() - t_store < window, "the test was too slow to stay inside the window"
        assert r["outcome"] == "hit" and r["data"] == [block_bytes(s, ROW_STRIDE) for s in seeds], r
        # B's request did not touch A's scheduler: the window is not renewed
        # by peers. Past it (and past the grant's release) A idles again.
        time.sleep(window + 0.5)
        t0 = time.monotonic()
        r = b.call("fetch", "b-late", kv_source(sa, "kv-late"), later, 30.0)
        assert r["outcome"] == "miss" and time.monotonic() - t0 >= SERVE_TIMEOUT, r
    finally:
        for e in engines:
            e.close()
        for sc in scs:
            sc.stop()
