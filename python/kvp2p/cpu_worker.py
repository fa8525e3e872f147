"""vLLM's tiering offload on CPU engines: a spec whose worker copies blocks
between the engine's KV tensors and the CPU region with torch, no CUDA.

vLLM's OffloadingConnector with TieringOffloadingSpec refuses to start on a
CPU platform (vllm/v1/kv_offload/cpu/spec.py, get_worker: "CPU Offloading is
currently only supported on CUDA-alike and XPU GPUs"): its worker moves bytes
with CUDA streams and copy kernels. Everything else (the scheduler-side
manager, the /dev/shm region, secondary tiers such as kvp2p) runs on CPUs.
This spec keeps all of that and swaps in a worker that does the same copies
with tensor gathers and scatters, so vLLM's CPU build can use the CPU tier
and kvp2p with no patch to vLLM:

    "kv_connector": "OffloadingConnector",
    "kv_connector_extra_config": {
        "spec_name": "CPUTieringOffloadingSpec",
        "spec_module_path": "kvp2p.cpu_worker",
        "cpu_bytes_to_use": ..., "secondary_tiers": [...]}

Layout: the region vLLM's own worker uses (SharedOffloadRegion): chunk b at
b * row_stride; in a chunk, each worker's slot; in the slot, every KV tensor's
page times blocks_per_chunk, side by side (create_next_worker_view). So the
bytes a kvp2p sidecar sends or receives are exactly vLLM's.

Copies: per transfer, one gather and one scatter per KV tensor (in vLLM's
CPU backend, one per attention layer), across every KV cache group; no Python
loop over blocks. A copy per block per layer ran at 4-5 GB/s on this
project's test machine, a copy per layer at 10-11 GB/s. The copies are done
when submit_* returns: the forward pass on CPU is synchronous, so there is
nothing to overlap with; results are reported at the next get_finished, as
vLLM's worker does.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from vllm.v1.kv_offload.base import (
    BlockIDsLoadStoreSpec,
    CanonicalKVCaches,
    GPULoadStoreSpec,
    LoadStoreSpec,
    OffloadingWorker,
    TransferResult,
)
from vllm.v1.kv_offload.cpu.shared_offload_region import SharedOffloadRegion
from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec


@dataclass(frozen=True)
class Part:
    """One copy unit: `page` bytes of a block in engine tensor `tensor`."""

    tensor: int
    page: int


class CPUCopyWorker(OffloadingWorker):
    """Copies blocks between CPU KV tensors and region views.

    engine: per KV tensor, an int8 (num_blocks, page_bytes) view (any row
    stride). region: per KV tensor, an int8 (num_chunks, page_bytes *
    blocks_per_chunk) view with the region's row stride. groups: per KV
    cache group, what to copy of each block (tensor, bytes), in vLLM's
    GPULoadStoreSpec group order."""

    def __init__(
        self,
        engine: Sequence[torch.Tensor],
        region: Sequence[torch.Tensor],
        groups: Sequence[Sequence[Part]],
        blocks_per_chunk: int,
        on_shutdown: object = None,
    ) -> None:
        if len(engine) != len(region) or not engine:
            raise ValueError(f"{len(engine)} engine tensors, {len(region)} region views")
        if blocks_per_chunk < 1:
            raise ValueError(f"blocks_per_chunk {blocks_per_chunk}")
        self._bpc = blocks_per_chunk
        self._engine = list(engine)
        # The region views as (num_chunks, blocks_per_chunk, page): sub-block
        # j of chunk b is [b, j], whatever the row stride.
        self._region = []
        for e, r in zip(engine, region):
            page = e.shape[1]
            if e.dtype != torch.int8 or r.dtype != torch.int8 or e.ndim != 2 or r.ndim != 2:
                raise ValueError("engine tensors and region views must be 2-D int8")
            if r.shape[1] != page * blocks_per_chunk:
                raise ValueError(f"region view of {r.shape[1]} bytes a chunk for pages of {page} x {blocks_per_chunk}")
            self._region.append(r.as_strided((r.shape[0], blocks_per_chunk, page), (r.stride(0), page, 1),
                                             r.storage_offset()))
        # Aliased layers share a tensor: copy each (tensor, bytes) once a group.
        self._groups = [list(dict.fromkeys(g)) for g in groups]
        for g in self._groups:
            for p in g:
                if not 0 <= p.tensor < len(engine) or not 0 < p.page <= engine[p.tensor].shape[1]:
                    raise ValueError(f"copy part {p} outside the engine tensors")
        self._done: list[TransferResult] = []
        self._on_shutdown = on_shutdown

    def _indices(self, gpu: GPULoadStoreSpec, cpu: BlockIDsLoadStoreSpec) -> list[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Per group: (group, engine block ids, region chunk ids, sub-block ids)."""
        sizes = list(gpu.group_sizes)
        starts = list(gpu.block_indices)
        if len(sizes) != len(self._groups) or len(starts) != len(sizes):
            raise ValueError(f"{len(sizes)} block groups for {len(self._groups)} KV cache groups")
        gpu_ids = np.asarray(gpu.block_ids, dtype=np.int64)
        chunk_ids = np.asarray(cpu.block_ids, dtype=np.int64)
        out = []
        g_off = c_off = 0
        for g, (n, first) in enumerate(zip(sizes, starts)):
            if n == 0:
                continue
            # The first chunk may be partly before the group's first block
            # (offloaded chunks larger than engine blocks): skip its head.
            skip = first % self._bpc
            nchunks = -(-(n + skip) // self._bpc)
            chunks = chunk_ids[c_off:c_off + nchunks]
            if len(chunks) != nchunks or g_off + n > len(gpu_ids):
                raise ValueError("transfer spec shorter than its group sizes")
            flat = (chunks[:, None] * self._bpc + np.arange(self._bpc)[None, :]).ravel()[skip:skip + n]
            out.append((g, torch.from_numpy(gpu_ids[g_off:g_off + n].copy()),
                        torch.from_numpy(flat // self._bpc), torch.from_numpy(flat % self._bpc)))
            g_off += n
            c_off += nchunks
        if g_off != len(gpu_ids) or c_off != len(chunk_ids):
            raise ValueError(f"transfer spec of {len(gpu_ids)} blocks / {len(chunk_ids)} chunks, groups use {g_off} / {c_off}")
        return out

    def _transfer(self, job_id: int, gpu: GPULoadStoreSpec, cpu: LoadStoreSpec, to_region: bool) -> bool:
        if not isinstance(cpu, BlockIDsLoadStoreSpec):
            raise TypeError(f"CPU side of a transfer is {type(cpu).__name__}")
        t0 = time.perf_counter()
        nbytes = 0
        for g, blocks, chunks, subs in self._indices(gpu, cpu):
            for p in self._groups[g]:
                eng = self._engine[p.tensor][:, :p.page]
                reg = self._region[p.tensor][:, :, :p.page]
                if to_region:
                    reg[chunks, subs] = eng.index_select(0, blocks)
                else:
                    eng.index_copy_(0, blocks, reg[chunks, subs])
                nbytes += len(blocks) * p.page
        self._done.append(TransferResult(job_id=job_id, success=True, transfer_size=nbytes,
                                         transfer_time=time.perf_counter() - t0))
        return True

    def submit_store(self, job_id: int, src_spec: GPULoadStoreSpec, dst_spec: LoadStoreSpec) -> bool:
        return self._transfer(job_id, src_spec, dst_spec, to_region=True)

    def submit_load(self, job_id: int, src_spec: LoadStoreSpec, dst_spec: GPULoadStoreSpec) -> bool:
        return self._transfer(job_id, dst_spec, src_spec, to_region=False)

    def get_finished(self) -> list[TransferResult]:
        done, self._done = self._done, []
        return done

    def wait(self, job_ids: set[int]) -> None:
        return  # every copy is done when submit_* returns

    def shutdown(self) -> None:
        self._engine.clear()
        self._region.clear()
        if callable(self._on_shutdown):
            self._on_shutdown()
            self._on_shutdown = None


def engine_views(kv_caches: CanonicalKVCaches) -> list[torch.Tensor]:
    """Each canonical KV tensor as int8 (num_blocks, page_size_bytes), as
    vLLM's worker views them (a packed tensor keeps its row stride)."""
    out = []
    for t in kv_caches.tensors:
        x = t.tensor
        if x.dtype == torch.int8 and x.ndim == 2 and x.shape[1] == t.page_size_bytes:
            out.append(x)
        else:
            out.append(x.view(torch.int8).view(-1, t.page_size_bytes))
    return out


class CPUTieringOffloadingSpec(TieringOffloadingSpec):
    """TieringOffloadingSpec with a worker that runs on CPU engines."""

    def get_worker(self, kv_caches: CanonicalKVCaches) -> OffloadingWorker:
        if self._worker is None:
            self._worker = self.create_worker(kv_caches)
        return self._worker

    def create_worker(self, kv_caches: CanonicalKVCaches) -> CPUCopyWorker:  # type: ignore[override]
        if self.config.canonical_layout:
            raise NotImplementedError("CPUTieringOffloadingSpec: canonical_layout is not supported")
        rank = 0 if self.replicated_layout else self.config.parallel.rank
        region = SharedOffloadRegion(
            engine_id=self._engine_id, num_chunks=self.num_chunks, rank=rank,
            kv_bytes_per_chunk=self.kv_bytes_per_chunk, cpu_page_size=self.cpu_page_size_per_worker,
        )
        try:
            engine = engine_views(kv_caches)
            views = [region.create_next_worker_view(e.shape[1] * self.blocks_per_chunk) for e in engine]
            groups = [[Part(r.tensor_idx, r.page_size_bytes) for r in refs] for refs in kv_caches.group_data_refs]
            return CPUCopyWorker(engine, views, groups, self.blocks_per_chunk, on_shutdown=region.cleanup)
        except Exception:
            region.cleanup()
            raise
