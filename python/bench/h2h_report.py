"""The head-to-head's records (one JSON line per consumer request) and its
table: per tier and scenario, the notions of internal/report (requests,
loads, fallbacks, false fallbacks, stuck, corrupt loads, time to an answer
with censored samples counted) measured on real engines.

Time to fallback is not visible from outside vLLM: a fallback shows as the
request's time to first token (TTFT, from B's add), which includes B's own
prefill of the prompt. The table gives that time and, under it, B's
recompute TTFT of the same prompt length measured in the same run; for
kvp2p also when B's sidecar decided the fallback (its log), which is the
time to fallback without B's prefill."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import IO


@dataclass
class Record:
    tier: str
    scenario: str
    rep: int
    kind: str  # "fault": the request the fault met; "probe": after the heal; "healthy"; "recompute";
    # "slow": the source is alive and reachable, only slow (a fallback is false)
    mode: str  # "sym" (remote_kv_source) or "pd" (remote_prefiller)
    outcome: str  # "hit" (loaded from A), "fallback" (computed at B), "stuck" (no answer by the cap)
    seconds: float  # from B's add to its answer (to the cap when stuck: a lower bound)
    ttft: float | None
    loaded: int  # tokens from p2p
    tokens_equal: bool | None  # to the reference (A's cached-prefix or full-prefill tokens); None: stuck
    corrupt: bool  # loaded, but the tokens differ from A's cached-prefix tokens
    answered_after_heal: float | None  # a stuck request's answer, seconds after the heal; None: never
    load1: float  # the machine's 1-minute load average when the request was added
    # kvp2p: from B's request to B's sidecar deciding the fallback (its log's
    # "request falls back" line for the request's kv id), so without B's own
    # prefill; None where not seen (a load, or vLLM's tier).
    fallback_s: float | None = None


def write(out: IO[str], r: Record) -> None:
    out.write(json.dumps(asdict(r)) + "\n")
    out.flush()


def read(lines: Iterable[str]) -> list[Record]:
    return [Record(**json.loads(line)) for line in lines if line.strip()]


def pct(xs: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(xs)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


def _secs(rs: list[Record]) -> str:
    """First token p50 / p99: TTFT, or for a stuck request the cap (a lower bound)."""
    if not rs:
        return "-"
    xs = [r.seconds if r.ttft is None else r.ttft for r in rs]
    cens = sorted(r.seconds for r in rs if r.outcome == "stuck")

    def fmt(v: float) -> str:
        return (">=" if cens and v >= cens[0] else "") + f"{v:.2f}"

    return f"{fmt(pct(xs, 50))} / {fmt(pct(xs, 99))}" + (f" ({len(cens)} censored)" if cens else "")


def _decided(rs: list[Record]) -> str:
    """Fallback decided p50 / p99 (kvp2p's sidecar log), where seen."""
    xs = [r.fallback_s for r in rs if r.fallback_s is not None]
    return f"{pct(xs, 50):.2f} / {pct(xs, 99):.2f}" if xs else "-"


COLUMNS = ("tier", "scenario", "requests", "loads", "fallbacks", "false fb", "stuck", "left stuck", "corrupt",
           "tokens equal", "TTFT p50 / p99 s", "fallback decided p50 / p99 s", "probes to recover", "never recovered",
           "load avg")


def rows(recs: list[Record]) -> list[tuple[str, ...]]:
    out = []
    keys = list(dict.fromkeys((r.tier, r.scenario) for r in recs if r.kind != "recompute"))
    for tier, scen in keys:
        mine = [r for r in recs if r.tier == tier and r.scenario == scen]
        main = [r for r in mine if r.kind in ("fault", "healthy", "slow")]
        probes = [r for r in mine if r.kind == "probe"]
        judged = [r for r in main if r.tokens_equal is not None]
        reps = sorted({r.rep for r in mine})
        needed, never = [], 0
        for rep in reps:
            ps = [r for r in probes if r.rep == rep]
            if not ps:
                continue
            first = next((i for i, r in enumerate(ps) if r.outcome == "hit"), None)
            if first is None:
                never += 1
            else:
                needed.append(str(first + 1))
        loads = [r.load1 for r in mine]
        out.append((
            tier, scen, str(len(main)),
            str(sum(r.outcome == "hit" for r in main)),
            str(sum(r.outcome == "fallback" for r in main)),
            str(sum(r.outcome == "fallback" and r.kind in ("healthy", "slow") for r in main)),
            str(sum(r.outcome == "stuck" for r in main)),
            str(sum(r.outcome == "stuck" and r.answered_after_heal is None for r in main)),
            str(sum(r.corrupt for r in mine)),
            f"{sum(bool(r.tokens_equal) for r in judged)}/{len(judged)}",
            _secs(main),
            _decided(main),
            (",".join(needed) or "none loaded") if probes else "-",
            str(never) if probes else "-",
            f"{min(loads):.1f}-{max(loads):.1f}",
        ))
    return out


def table(out: IO[str], recs: list[Record]) -> None:
    """A Markdown table, one row per tier and scenario, and the recompute baseline."""
    out.write("| " + " | ".join(COLUMNS) + " |\n")
    out.write("|" + " --- |" * len(COLUMNS) + "\n")
    for row in rows(recs):
        out.write("| " + " | ".join(row) + " |\n")
    for tier in dict.fromkeys(r.tier for r in recs):
        rc = [r.ttft for r in recs if r.tier == tier and r.kind == "recompute" and r.ttft is not None]
        hits = [r.ttft for r in recs if r.tier == tier and r.outcome == "hit" and r.ttft is not None]
        if rc or hits:
            out.write(f"\n{tier}: B recomputing the prompt, TTFT p50 {pct(rc, 50):.3f} s (n={len(rc)})" if rc else f"\n{tier}:")
            if hits:
                out.write(f"; loaded from A, TTFT p50 {pct(hits, 50):.3f} s, p99 {pct(hits, 99):.3f} s (n={len(hits)})")
    out.write("\n")
