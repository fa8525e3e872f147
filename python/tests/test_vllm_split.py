"""Issue 23's split load, inside vLLM's real tiering manager (scheduler
side, CPU, no sidecar): the peer's answers land in the middle of a
request's lookup pass, and vLLM must still promote the request's blocks as
ONE load job. The tier's worker thread is stopped; the test plays it
(TierCore.next_step / apply) at the worst moment."""

from __future__ import annotations

import importlib.util
import os

import pytest

if os.environ.get("KVP2P_VLLM") == "0":
    pytest.skip("KVP2P_VLLM=0: the vLLM tests are off", allow_module_level=True)
if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed in this environment (scripts/pyenv.sh --vllm)", allow_module_level=True)

from kvp2p._pb import engine_pb2 as pb  # noqa: E402
from kvp2p.testing.vllm_harness import build_manager, manager_lock, offload_key  # noqa: E402


def test_answers_mid_pass_promote_one_job() -> None:
    from vllm.v1.kv_offload.base import LookupResult, ReqContext, ScheduleEndContext

    engine_id = f"kvp2p-split-{os.getpid()}"
    spec, mgr = build_manager(engine_id, "/nonexistent/kvp2p.sock", 64, 4096, {"attach_timeout_s": 0})
    try:
        tier = mgr.secondary_tiers[0]
        core = tier.core
        core.close()  # no worker thread, no sidecar: the test files the answers itself
        submitted: list[list[bytes]] = []
        real_submit = tier.submit_load

        def spy(job):  # type: ignore[no-untyped-def]
            submitted.append(list(job.keys))
            real_submit(job)

        tier.submit_load = spy
        end = ScheduleEndContext(new_req_ids=(), preempted_req_ids=())
        ctx = ReqContext(req_id="r", kv_transfer_params={"remote_kv_source": {
            "remote_host": "127.0.0.1", "remote_port": 9, "kv_request_id": "kv-r"}})
        keys = [offload_key(i) for i in range(13)]
        with manager_lock(mgr):
            mgr.on_new_request(ctx)
            # Step 1: every block RETRY; the step's end hands the lookup over.
            assert [mgr.lookup(k, ctx) for k in keys] == [LookupResult.RETRY] * 13
            mgr.on_schedule_end(end)
        step = core.next_step()
        assert step is not None
        asked = step.asked
        resp = pb.StepResponse(lookups=[pb.LookupAnswer(req_id=rid, verdicts_packed=bytes([pb.VERDICT_HIT]) * len(ks))
                                        for rid, ks in asked.items()])
        with manager_lock(mgr):
            # Step 2: the sidecar's answer (all HIT) lands after the 7th
            # lookup of the scheduler's pass (_maximal_prefix_lookup's calls).
            seen = [mgr.lookup(k, ctx) for k in keys[:7]]
            core.apply(step, resp)
            seen += [mgr.lookup(k, ctx) for k in keys[7:]]
            mgr.on_schedule_end(end)
            assert not submitted, f"step 2 promoted {len(submitted[0])} of 13 blocks: {seen}"
            # Step 3: one view, all HIT: one promotion of the 13 blocks.
            seen = [mgr.lookup(k, ctx) for k in keys]
            assert seen == [LookupResult.HIT_PENDING] * 13, seen
            mgr.on_schedule_end(end)
        assert [len(j) for j in submitted] == [13]
    finally:
        mgr.shutdown()
        path = f"/dev/shm/vllm_offload_{engine_id}.mmap"
        if os.path.exists(path):
            os.unlink(path)
