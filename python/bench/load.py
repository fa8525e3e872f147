"""A load through two sidecars between two regions vs raw TCP of the same
bytes, in the same run.

    (cd python && ../.venv/bin/python bench/load.py [--blocks 256] [--block-bytes 262144] [--rounds 5])

kvp2p: engine B loads `blocks` blocks that engine A holds in its region
(symmetric P2P: lookups until HIT first, not timed), from submit_load to the
job's result as B's plugin core sees it (so the 2 ms completion poll is in).
Raw TCP: one loopback connection, A's region chunks sent with sendall from
the mapping and received with recv_into straight into B's region: the
floor for moving those bytes between two processes' memory over TCP.
Rounds alternate; the ratio is raw time / kvp2p time (goal >= 0.9).
Regions live in /dev/shm, as vLLM's.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# This checkout's kvp2p, not a copy installed in the environment.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kvp2p.testing.fake_engine import FakeEngine, key  # noqa: E402
from kvp2p.region import Region  # noqa: E402
from kvp2p.testing import Sidecar  # noqa: E402


def raw_tcp(src: Region, dst: Region, chunks: list[int], into: list[int]) -> float:
    ln = socket.socket()
    ln.bind(("127.0.0.1", 0))
    ln.listen(1)
    port = ln.getsockname()[1]
    done = threading.Event()

    def receive() -> None:
        conn, _ = ln.accept()
        with conn:
            for c in into:
                view = dst.chunk(c)
                got = 0
                while got < len(view):
                    n = conn.recv_into(view[got:])
                    if n == 0:
                        raise EOFError("sender closed early")
                    got += n
        done.set()

    t = threading.Thread(target=receive)
    t.start()
    t0 = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as s:
        for c in chunks:
            s.sendall(src.chunk(c))
        done.wait()
    dt = time.perf_counter() - t0
    t.join()
    ln.close()
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=256)
    ap.add_argument("--block-bytes", type=int, default=262144)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--poll", type=float, default=0.002, help="the plugin's poll interval while a load is open (s)")
    args = ap.parse_args()
    n, size = args.blocks, args.block_bytes
    tag = f"kvp2p-loadbench-{os.getpid()}"
    scs = []
    engines: list[FakeEngine] = []
    try:
        for who in "AB":
            path = f"/dev/shm/vllm_offload_{tag}-{who}.mmap"
            Region(path, 2 * n, size, create=True).close()
            scs.append(Sidecar(f"{tag}-{who}", 2 * n, size, region_dir="/dev/shm").start())
        a, b = FakeEngine(scs[0]), FakeEngine(scs[1], poll_interval=args.poll)
        engines = [a, b]
        a.wait_attached()
        b.wait_attached()
        seeds = list(range(n))
        for i in seeds:
            a.put(i, chunk=i)
        ks = [key(i) for i in seeds]
        mib = n * size / (1 << 20)
        kv_t: list[float] = []
        raw_t: list[float] = []
        for r in range(args.rounds + 1):  # round 0 warms up (sessions, page faults) and is not counted
            req = f"bench-{r}"
            b.core.new_request(req, {"remote_kv_source": {"remote_host": "127.0.0.1", "remote_port": scs[0].port,
                                                          "kv_request_id": f"kv-{r}"}})
            b.verdicts(req, seeds)
            b.until(lambda: all(v.name == "HIT" for v in b.verdicts(req, seeds)), peers=(a,), timeout=30)
            into = list(range(n, 2 * n))
            t0 = time.perf_counter()
            b.core.submit_load(r, req, ks, into)
            b.core.schedule_end()
            # No engine steps while the load runs (a symmetric load needs
            # none from A: its chunks were pinned at lookup); B's plugin
            # worker polls its sidecar on its own.
            d = None
            while d is None:
                time.sleep(0.0005)
                d = next((x for x in b.core.take_finished() if x.job_id == r), None)
            dt = time.perf_counter() - t0
            assert d is not None and d.success, d
            assert b.region.read(into[-1]) == a.region.read(n - 1)
            b.core.request_finished(req)
            raw_dt = raw_tcp(a.region, b.region, seeds, into)
            if r > 0:
                kv_t.append(dt)
                raw_t.append(raw_dt)
            a.until(lambda: not a.pinned, peers=(b,), timeout=10)
        kv, raw = statistics.median(kv_t), statistics.median(raw_t)
        print(f"{n} blocks of {size} bytes ({mib:.0f} MiB), {args.rounds} rounds, medians:")
        print(f"  kvp2p (two sidecars): {kv * 1e3:8.1f} ms  {mib / kv:8.0f} MiB/s   rounds {[round(x * 1e3, 1) for x in kv_t]}")
        print(f"  raw TCP (same bytes): {raw * 1e3:8.1f} ms  {mib / raw:8.0f} MiB/s   rounds {[round(x * 1e3, 1) for x in raw_t]}")
        print(f"ratio kvp2p/raw throughput: {raw / kv:.2f} (goal >= 0.9)")
    finally:
        for e in engines:
            e.close()
        for sc in scs:
            sc.stop()
            if os.path.exists(sc.region_path):
                os.unlink(sc.region_path)


if __name__ == "__main__":
    main()
