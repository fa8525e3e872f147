"""Kvp2pTier's own time inside each vLLM scheduler hook when there is no
work, inside vLLM's real tiering manager (needs vLLM). Microseconds.

    (cd python && ../.venv/bin/python bench/hooks.py [--n 20000])

The tier is built by vLLM (TieringOffloadingSpec.get_manager) and attached
to a real `kvp2p serve`; each hook is called directly, n times, under the
manager's lock, as the scheduler calls it. "No work": a request without
kv_transfer_params, no asks from peers, no jobs. Then, for comparison, steps
with work: the hooks only queue it; the plugin's worker thread makes the call.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# This checkout's kvp2p, not a copy installed in the environment.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _stats import pct, summary  # noqa: E402

from kvp2p.testing import Sidecar  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    from kvp2p.testing.vllm_harness import _Engine

    name = f"kvp2p-bench-{os.getpid()}"
    sc = Sidecar(name, 64, 16384, region_dir="/dev/shm").start()
    eng = None
    try:
        eng = _Engine(name, sc.socket, 64, 16384)
        assert eng.tier.core.client.wait_attached(5)
        eng.hook_times(2000)  # warm-up
        res = eng.hook_times(args.n)
        print(f"Kvp2pTier hooks with no work, {args.n} calls each, microseconds")
        worst = 0.0
        for hook, xs in res.items():
            worst = max(worst, pct(xs, 99))
            print(f"  {hook:24s} {summary(xs)}")
        print(f"goal p99 < 200 us in every hook: {'met' if worst < 200 else 'NOT met'} (worst p99 {worst:.1f} us)")
        busy = eng.busy_hook_times(max(args.n // 40, 50))
        print("with work (a new symmetric request per step, 64 first lookups, the step's end), microseconds")
        for hook, xs in busy.items():
            print(f"  {hook:24s} {summary(xs)}")
    finally:
        if eng is not None:
            eng.close()
        sc.stop()
        path = f"/dev/shm/vllm_offload_{name}.mmap"
        if os.path.exists(path):
            os.unlink(path)
        time.sleep(0)


if __name__ == "__main__":
    main()
