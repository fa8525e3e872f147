"""What finding a source costs the scheduler's thread, with no sidecar
(TierState alone, as the scheduler's hooks call it under the tier's lock):
a request naming no source, whose prefix nobody holds, against the
summaries of 0 and of N peers. Microseconds per request (its first lookup,
and the keys after it while candidates remain).

    (cd python && ../.venv/bin/python bench/find.py [--peers 1000] [--fill 8192] [--n 2000])

Each peer's filter is the size a CPU tier of --chunks chunks gets (32 bits
a chunk: 8,192 chunks, 4,096 words) holding --fill random keys (8,192:
full, the worst case for false positives). Also: what reporting a store in
Step.stored adds to submit_store (16 keys), against not reporting it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# This checkout's kvp2p, not a copy installed in the environment.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
from _stats import summary  # noqa: E402

from kvp2p.summaries import SummaryMirror  # noqa: E402
from kvp2p.testing.summaries import random_filter, snapshot, size_words  # noqa: E402
from kvp2p.tierstate import TierState, Verdict  # noqa: E402


def mirror(peers: int, fill: int, size: int, rng: np.random.Generator) -> SummaryMirror:
    m = SummaryMirror()
    for p in range(peers):
        for u in snapshot(f"10.0.{p // 256}.{p % 256}:7777", random_filter(fill, size, rng)):
            m.apply(u, 0.0)
    return m


def unheld(st: TierState, n: int, blocks: int, rng: np.random.Generator) -> tuple[list[float], int]:
    """Per request: the time of its lookups until the first MISS (its
    keys are random: nobody holds them); and how many answered RETRY first
    (a false positive: that request waits a step)."""
    times: list[float] = []
    retried = 0
    for i in range(n):
        keys = [bytes(k) for k in rng.integers(0, 256, (blocks, 16), dtype=np.uint8)]
        rid = f"r{i}"
        st.new_request(rid, None)
        t0 = time.perf_counter()
        first = st.lookup(rid, keys[0])
        j = 1
        v = first
        while v == Verdict.RETRY and j < blocks:
            v = st.lookup(rid, keys[j])
            j += 1
        times.append((time.perf_counter() - t0) * 1e6)
        retried += first == Verdict.RETRY
        st.schedule_end()
        st.request_finished(rid)
        st.next_step(None)
    return times, retried


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--peers", type=int, default=1000)
    ap.add_argument("--chunks", type=int, default=8192)
    ap.add_argument("--fill", type=int, default=8192)
    ap.add_argument("--blocks", type=int, default=32, help="a request's keys")
    ap.add_argument("--n", type=int, default=2000)
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    size = size_words(args.chunks)
    for peers in (0, args.peers):
        t0 = time.perf_counter()
        st = TierState(mirror=mirror(peers, args.fill, size, rng))
        built = time.perf_counter() - t0
        times, retried = unheld(st, args.n, args.blocks, rng)
        print(f"{peers:5d} peers ({size} words, {args.fill} keys each; built in {built:.1f}s): "
              f"nobody's prefix, us per request {summary(times)}; first key RETRY (false positive) "
              f"{retried}/{args.n}")
    keys = [bytes(k) for k in rng.integers(0, 256, (16, 16), dtype=np.uint8)]
    chunks = list(range(16))
    for report in (False, True):
        st = TierState()
        st.set_find(report)
        times = []
        for i in range(args.n):
            t0 = time.perf_counter()
            st.submit_store(i, "s", keys, chunks)
            times.append((time.perf_counter() - t0) * 1e6)
            st.take_finished()
            if i % 64 == 0:
                st.next_step(None)
        print(f"submit_store of 16 keys, reporting {'on ' if report else 'off'}: us {summary(times)}")


if __name__ == "__main__":
    main()
