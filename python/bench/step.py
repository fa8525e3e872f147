"""One step's API call from Python over the Unix socket, with 0, 64 and
1024 lookup keys: building the StepRequest, the Step RPC to a real `kvp2p
serve`, and decoding the answer. Microseconds; with the CPU each step
cost the stepping thread (client) and the sidecar's process (sidecar).

    (cd python && ../.venv/bin/python bench/step.py [--n 3000])

The request's source is a second sidecar, so the lookups are real ones
(the first step registers them, later steps find them answered).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# This checkout's kvp2p, not a copy installed in the environment.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _stats import pct, summary  # noqa: E402

from kvp2p._pb import engine_pb2 as pb  # noqa: E402
from kvp2p.testing.fake_engine import FakeEngine, key  # noqa: E402
from kvp2p.testing import Sidecar  # noqa: E402


def proc_cpu_ns(pid: int) -> int:
    """A process's user and system CPU so far (/proc/pid/stat, clock ticks)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=3000)
    args = ap.parse_args()
    sa, sb = Sidecar("A", 64, 4096).start(), Sidecar("B", 64, 4096).start()
    a = b = None
    try:
        a, b = FakeEngine(sa), FakeEngine(sb)
        a.wait_attached()
        b.wait_attached()
        client = b.core.client
        params = pb.TransferParams(remote_kv_source=pb.Remote(host="127.0.0.1", port=sa.port, kv_request_id="kv"))
        client.step(pb.StepRequest(new_requests=[pb.NewRequest(req_id="r", params=params)], end_step=True))
        reg = client.registered
        via = f"the step socket {reg.step_socket}" if reg and client.step_transport == "socket" else f"gRPC on {sb.socket}"
        print(f"Step over {via}, {args.n} calls each, microseconds")
        worst = {}
        for nkeys, packed in ((0, False), (64, False), (64, True), (1024, False), (1024, True)):
            keys = [key(i) for i in range(nkeys)]
            times: list[float] = []
            for i in range(args.n + 200):
                if i == 200:  # CPU per step, warm-up excluded
                    c0, s0 = time.thread_time_ns(), proc_cpu_ns(sb.proc.pid)
                t0 = time.perf_counter_ns()
                if not keys:
                    lookups = []
                elif packed:  # what the plugin sends: one field per batch, verdicts one byte each
                    lookups = [pb.LookupBatch(req_id="r", keys_packed=b"".join(keys), packed_verdicts=True)]
                else:
                    lookups = [pb.LookupBatch(req_id="r", keys=keys)]
                resp = client.step(pb.StepRequest(lookups=lookups, end_step=True))
                _ = [list(x.verdicts_packed or x.verdicts) for x in resp.lookups]
                dt = (time.perf_counter_ns() - t0) / 1e3
                if i >= 200:  # warm-up excluded
                    times.append(dt)
            ccpu = (time.thread_time_ns() - c0) / args.n / 1e3
            scpu = (proc_cpu_ns(sb.proc.pid) - s0) / args.n / 1e3
            worst[(nkeys, packed)] = pct(times, 99)
            print(f"  {nkeys:5d} keys{' packed' if packed else '       '}: {summary(times)}"
                  f"  cpu/step: client {ccpu:.0f}, sidecar {scpu:.0f}")
        worst[1024] = worst[(1024, True)]
        print(f"goal p99 < 1000 us at 1024 keys: {'met' if worst[1024] < 1000 else 'NOT met'} ({worst[1024]:.0f} us)")
    finally:
        for e in (a, b):
            if e is not None:
                e.close()
        sa.stop()
        sb.stop()


if __name__ == "__main__":
    main()
