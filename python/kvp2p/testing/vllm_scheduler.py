"""A vLLM engine's scheduler, for real, on CPU: vLLM's v1 Scheduler with its
OffloadingConnector (TieringOffloadingSpec, CPU region in /dev/shm,
Kvp2pTier loaded from {"type": "Kvp2pTier", "module_path": "kvp2p.vllm"}),
built from a VllmConfig of a tiny local model config (no weights, no
tokenizer, no GPU).

What is emulated is only what needs a GPU: the model (one token sampled per
scheduled request) and the offloading worker (a store job copies a "GPU"
block into its CPU chunk, a load job checks the CPU chunk's bytes against
the block it was loaded for and reports it done, as
offloading/worker.py's get_finished does). A "GPU" block's bytes are a
function of its block hash, so engines that compute the same prompt hold
the same bytes, and a block loaded from a peer can be checked.

Block hashes must agree across engines: set PYTHONHASHSEED the same in
every engine process (as vLLM's P2P tier requires).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from typing import Any

NUM_GPU_BLOCKS = 64
BLOCK_SIZE = 16  # tokens per block


def block_content(block_hash: bytes, size: int) -> bytes:
    out = bytearray()
    h = hashlib.sha256(b"kv|" + block_hash).digest()
    while len(out) < size:
        out += h
        h = hashlib.sha256(h).digest()
    return bytes(out[:size])


def _model_dir() -> str:
    """A config-only Llama (2 layers, 4 KV heads of 16): enough for vLLM's
    configs; no weights are ever loaded."""
    from transformers import LlamaConfig

    d = os.path.join(tempfile.gettempdir(), "kvp2p-tiny-llama")
    if not os.path.exists(os.path.join(d, "config.json")):
        LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=1024).save_pretrained(d)
    return d


class SchedulerEngine:
    """One engine: vLLM's Scheduler plus the emulated model and worker."""

    def __init__(self, engine_id: str, socket: str, num_chunks: int,
                 tier_opts: dict[str, Any] | None = None) -> None:
        import torch
        from vllm.config import CacheConfig, DeviceConfig, KVTransferConfig, ModelConfig, SchedulerConfig, VllmConfig
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
        from vllm.v1.structured_output import StructuredOutputManager

        from kvp2p.region import Region, vllm_region_path

        spec = FullAttentionSpec(block_size=BLOCK_SIZE, num_kv_heads=4, head_size=16, dtype=torch.float16)
        self.row_stride = spec.page_size_bytes * 2  # two layers
        model = ModelConfig(model=_model_dir(), skip_tokenizer_init=True, dtype="float16", max_model_len=1024)
        kvt = KVTransferConfig(
            kv_connector="OffloadingConnector", kv_role="kv_both", engine_id=engine_id,
            kv_connector_extra_config={
                "spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": num_chunks * self.row_stride,
                "secondary_tiers": [{"type": "Kvp2pTier", "module_path": "kvp2p.vllm", "socket": socket,
                                     **(tier_opts or {})}]})
        cfg = VllmConfig(model_config=model, cache_config=CacheConfig(block_size=BLOCK_SIZE, enable_prefix_caching=True),
                         kv_transfer_config=kvt, device_config=DeviceConfig("cpu"),
                         scheduler_config=SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=1024,
                                                          max_model_len=1024, is_encoder_decoder=False))
        cfg.cache_config.num_gpu_blocks = NUM_GPU_BLOCKS
        layers = [f"model.layers.{i}.self_attn.attn" for i in range(2)]
        kcc = KVCacheConfig(num_blocks=NUM_GPU_BLOCKS, kv_cache_tensors=[],
                            kv_cache_groups=[KVCacheGroupSpec(layers, spec)])
        self.sched = Scheduler(vllm_config=cfg, kv_cache_config=kcc,
                               structured_output_manager=StructuredOutputManager(cfg), block_size=BLOCK_SIZE)
        os.environ.setdefault("PYTHONHASHSEED", "0")  # one block-hash seed for the fleet
        hash_fn = get_hash_fn_by_name(cfg.cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        self.hasher = get_request_block_hasher(BLOCK_SIZE, hash_fn)
        conn: Any = self.sched.connector
        self.mgr = conn.connector_scheduler.manager
        self.tier = self.mgr.secondary_tiers[0]
        self.num_chunks = self.mgr.primary_tier._num_chunks
        self.region = Region(vllm_region_path(cfg.kv_transfer_config.engine_id), self.num_chunks, self.row_stride)
        self.engine_id = cfg.kv_transfer_config.engine_id
        self.reqs: dict[str, Any] = {}
        self.loaded: dict[str, list[bool]] = {}  # request -> per loaded chunk: bytes as expected
        self.finished: set[str] = set()

    def info(self) -> dict[str, Any]:
        return {"tier": type(self.tier).__module__ + "." + type(self.tier).__name__,
                "registration": self.tier.core.client.registration,
                "num_chunks": self.num_chunks, "row_stride": self.row_stride, "engine_id": self.engine_id}

    def add(self, req_id: str, prompt: list[int], params: dict | None) -> None:
        from vllm import SamplingParams
        from vllm.v1.request import Request

        sp = SamplingParams(max_tokens=1, extra_args={"kv_transfer_params": params} if params else None)
        r = Request(req_id, prompt, sp, None, block_hasher=self.hasher)
        self.reqs[req_id] = r
        self.sched.add_request(r)

    def _gpu_hashes(self) -> dict[int, bytes]:
        """GPU block id -> the block hash it holds, for the running requests."""
        out: dict[int, bytes] = {}
        for rid, r in self.reqs.items():
            if rid in self.finished:
                continue
            try:
                ids = self.sched.kv_cache_manager.get_block_ids(rid)[0]
            except (KeyError, AssertionError):
                continue
            for bid, h in zip(ids, r.block_hashes):
                out[bid] = bytes(h)
        return out

    def step(self) -> dict[str, Any]:
        """One engine step: schedule, run the emulated worker and model, update."""
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import OffloadingWorkerMetadata
        from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput

        out = self.sched.schedule()
        meta = out.kv_connector_metadata
        done = OffloadingWorkerMetadata()
        recving: set[str] = set()
        if meta is not None:
            hashes = self._gpu_hashes()
            for jid, job in meta.store_jobs.items():  # GPU -> CPU
                for bid, chunk in zip(job.src_spec.block_ids, job.dst_spec.chunk_ids):
                    self.region.write(int(chunk), block_content(hashes[int(bid)], self.row_stride))
                done.mark_completed(jid)
            for jid, job in meta.load_jobs.items():  # CPU -> GPU
                ok = [self.region.read(int(c)) == block_content(hashes.get(int(b), b""), self.row_stride)
                      for c, b in zip(job.src_spec.chunk_ids, job.dst_spec.block_ids)]
                self.loaded.setdefault(job.req_id, []).extend(ok)
                done.mark_completed(jid)
                if not getattr(job, "sync", False):  # vLLM 0.33's sync loads; 0.32's are all async
                    recving.add(job.req_id)
        scheduled = list(out.num_scheduled_tokens)
        mro = ModelRunnerOutput(req_ids=scheduled, req_id_to_index={r: i for i, r in enumerate(scheduled)},
                                sampled_token_ids=[[7] if self._prefilled(r, out) else [] for r in scheduled])
        mro.kv_connector_output = KVConnectorOutput(finished_recving=recving or None,
                                                    kv_connector_worker_meta=done if done.completed_jobs else None)
        eco = self.sched.update_from_output(out, mro)
        for outs in eco.values():
            for o in outs.outputs:
                if o.finish_reason is not None:
                    self.finished.add(o.request_id)
        return {"scheduled": {r: out.num_scheduled_tokens[r] for r in scheduled}}

    def _prefilled(self, req_id: str, out: Any) -> bool:
        r = self.reqs[req_id]
        return r.num_computed_tokens + out.num_scheduled_tokens[req_id] >= r.num_prompt_tokens

    def run(self, req_id: str, prompt: list[int], params: dict | None, max_steps: int = 2000,
            sleep: float = 0.002) -> dict[str, Any]:
        """Adds a request and steps until it finishes. Reports how many of
        its prompt tokens came from outside (the connector's hit) and
        whether every loaded chunk held the expected bytes."""
        import time

        self.add(req_id, prompt, params)
        steps = 0
        first_sched: int | None = None
        while req_id not in self.finished and steps < max_steps:
            s = self.step()
            if first_sched is None and req_id in s["scheduled"]:
                first_sched = s["scheduled"][req_id]
            steps += 1
            time.sleep(sleep)
        r = self.reqs[req_id]
        for _ in range(50):  # let stores and releases settle
            self.step()
        return {"finished": req_id in self.finished, "steps": steps,
                "external_tokens": r.num_prompt_tokens - (first_sched or 0) if first_sched else None,
                "loaded_ok": self.loaded.get(req_id, []), "prompt_tokens": r.num_prompt_tokens}

    def idle(self) -> bool:
        """Steps if vLLM's EngineCore would (has_work); returns whether it did."""
        if self.sched.has_requests() or self.mgr.has_pending_work():
            self.step()
            return True
        return False

    def close(self) -> None:
        self.region.close()
        self.sched.shutdown()
