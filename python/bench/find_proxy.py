"""Real engines behind `kvp2p proxy --pick round-robin --source none`: the
share of the prefix tokens an oracle router would have loaded from peers
that the engines found and loaded themselves, TTFT of those loads against
recomputing, tokens against the holder's own answer, and the fallbacks.
The fleet, workload and oracle: kvp2p.testing.find_proxy.

    cd python && PYTHONPATH=$PWD KVP2P_BIN=../kvp2p ../.venv-cpu/bin/python bench/find_proxy.py

One JSON line per request to --out, then the summary (JSON) on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict

from kvp2p.testing import find_proxy as fp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engines", type=int, default=2)
    ap.add_argument("--gap", type=float, default=1.5,
                    help="seconds between a request's end and the next one's send (a fresh summary needs up to find.interval, 1 s)")
    ap.add_argument("--docs", type=int, default=12)
    ap.add_argument("--doc-uses", type=int, default=50)
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], help="a sidecar setting (key=value) beyond find's")
    ap.add_argument("--no-controls", action="store_true", help="skip the recompute control of each found load")
    ap.add_argument("--shape", choices=("small", "medium"), default="small",
                    help="the tiny model's shape (medium: 8 layers of 1024, 1 MiB a block: a prefill worth skipping)")
    ap.add_argument("--out", default="find_proxy.jsonl")
    a = ap.parse_args()

    wl = fp.Workload(docs=a.docs, doc_uses=a.doc_uses, sessions=a.sessions, turns=a.turns, seed=a.seed)
    reqs = wl.requests()
    load0 = open("/proc/loadavg").read().split()[:3]
    shape = fp.tiny_model.MEDIUM if a.shape == "medium" else fp.tiny_model.SMALL
    cpu_bytes = (2 << 30) if a.shape == "medium" else (256 << 20)  # nothing evicted: see fp.Oracle
    with fp.fleet(a.engines, sidecar_sets=tuple(a.set), shape=shape, cpu_bytes=cpu_bytes) as f, open(a.out, "w") as out:
        side0 = [e.sidecar_counters() for e in f.engines]

        def log(r: fp.Row) -> None:
            d = asdict(r)
            del d["prompt"]
            out.write(json.dumps(d) + "\n")
            out.flush()
            print(f"{r.i:3d} {r.name:10s} e{r.engine} len={r.length:4d} local={r.device + r.host:4d}/{r.oracle_local:4d} "
                  f"p2p={r.p2p:4d}/{r.oracle_peer:4d} ttft={r.ttft * 1e3:6.0f}ms"
                  + (f" ctrl={r.control_ttft * 1e3:6.0f}ms" if r.control_ttft else ""), file=sys.stderr, flush=True)

        rows = fp.run(f, reqs, gap=a.gap, controls=not a.no_controls, log=log)
        side1 = [e.sidecar_counters() for e in f.engines]
        fp.references(f, rows)
        load1 = open("/proc/loadavg").read().split()[:3]
    s = fp.summary(rows)
    keys = ("kvp2p_load_failures_total", "kvp2p_lookup_fallbacks_total", "kvp2p_lookup_misses_total",
            "kvp2p_lookup_hits_total", "kvp2p_deliberate_fallbacks_total")
    s["sidecars"] = {k: sum(int(b.get(k, 0) - a0.get(k, 0)) for a0, b in zip(side0, side1)) for k in keys}
    s["engines"], s["gap_s"], s["workload"], s["shape"] = a.engines, a.gap, asdict(wl), a.shape
    s["loadavg_start"], s["loadavg_end"] = load0, load1
    s["sets"] = a.set
    print(json.dumps(s, indent=1))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
