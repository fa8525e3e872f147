"""kvp2p.cpu_worker's copies, against an independent reading of vLLM's
region layout (chunk b at b * row_stride; in it, this worker's slot; in the
slot, each KV tensor's blocks_per_chunk pages side by side). No engine: the
garbage control, with a real model, is in test_real_engines.py."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm.v1.kv_offload.base")

from vllm.v1.kv_offload.base import GPULoadStoreSpec  # noqa: E402
from vllm.v1.kv_offload.cpu.common import CPULoadStoreSpec  # noqa: E402

from kvp2p.cpu_worker import CPUCopyWorker, Part  # noqa: E402

NUM_BLOCKS, NUM_CHUNKS = 16, 12
PAGES = (64, 96)  # two KV tensors (two layers) of different page sizes
SLOT_OFFSET = 32  # this worker's slot starts past another worker's bytes


def make(bpc: int, groups: list[list[Part]] | None = None) -> tuple[CPUCopyWorker, list, torch.Tensor, int]:
    g = torch.Generator().manual_seed(bpc)
    engine = [torch.randint(-128, 128, (NUM_BLOCKS, p), dtype=torch.int8, generator=g) for p in PAGES]
    slot = sum(PAGES) * bpc
    row_stride = SLOT_OFFSET + slot + 40  # padding at the end of each row, as the page rounding leaves
    base = torch.zeros(NUM_CHUNKS * row_stride, dtype=torch.int8)
    views, off = [], SLOT_OFFSET
    for p in PAGES:
        views.append(torch.as_strided(base, (NUM_CHUNKS, p * bpc), (row_stride, 1), off))
        off += p * bpc
    groups = groups or [[Part(0, PAGES[0]), Part(1, PAGES[1])]]
    return CPUCopyWorker(engine, views, groups, bpc), engine, base, row_stride


def region_page(base: torch.Tensor, row_stride: int, bpc: int, tensor: int, chunk: int, sub: int) -> torch.Tensor:
    """Sub-block `sub` of chunk `chunk`, tensor `tensor`, read by byte offsets."""
    off = chunk * row_stride + SLOT_OFFSET + sum(PAGES[:tensor]) * bpc + sub * PAGES[tensor]
    return base[off:off + PAGES[tensor]]


def test_store_then_load_round_trip() -> None:
    w, engine, base, rs = make(1)
    blocks, chunks = [3, 7, 1, 15], [5, 0, 9, 11]
    assert w.submit_store(4, GPULoadStoreSpec(blocks, [4], [0]), CPULoadStoreSpec(chunks))
    for b, c in zip(blocks, chunks):
        for t in range(2):
            assert torch.equal(region_page(base, rs, 1, t, c, 0), engine[t][b]), (b, c, t)
    # Bytes outside the stored pages (other workers' slots, padding, other chunks) untouched.
    touched = torch.zeros_like(base, dtype=torch.bool)
    for c in chunks:
        touched[c * rs + SLOT_OFFSET:c * rs + SLOT_OFFSET + sum(PAGES)] = True
    assert not base[~touched].any()
    want = [e[blocks].clone() for e in engine]
    for e in engine:
        e.zero_()
    dest = [0, 2, 4, 6]
    assert w.submit_load(5, CPULoadStoreSpec(chunks), GPULoadStoreSpec(dest, [4], [0]))
    for t in range(2):
        assert torch.equal(engine[t][dest], want[t])
        assert not engine[t][[1, 3, 5]].any()  # blocks not loaded into stay as they were
    done = w.get_finished()
    assert [(d.job_id, d.success, d.transfer_size) for d in done] == [(4, True, 4 * sum(PAGES)), (5, True, 4 * sum(PAGES))]
    assert w.get_finished() == []


def test_chunks_of_several_blocks_with_an_unaligned_start() -> None:
    """blocks_per_chunk 2: a group starting at logical block 3 fills the
    second half of its first chunk (vLLM's skip)."""
    bpc = 2
    w, engine, base, rs = make(bpc)
    blocks, chunks = [4, 9, 2], [7, 1]  # logical blocks 3, 4, 5 -> chunk 7 sub 1, chunk 1 subs 0 and 1
    assert w.submit_store(1, GPULoadStoreSpec(blocks, [3], [3]), CPULoadStoreSpec(chunks))
    where = [(7, 1), (1, 0), (1, 1)]
    for b, (c, s) in zip(blocks, where):
        for t in range(2):
            assert torch.equal(region_page(base, rs, bpc, t, c, s), engine[t][b]), (b, c, s, t)
    assert not region_page(base, rs, bpc, 0, 7, 0).any()  # the skipped head of chunk 7
    want = [e[blocks].clone() for e in engine]
    for e in engine:
        e.zero_()
    w.submit_load(2, CPULoadStoreSpec(chunks), GPULoadStoreSpec([10, 11, 12], [3], [3]))
    for t in range(2):
        assert torch.equal(engine[t][[10, 11, 12]], want[t])


def test_groups_copy_their_own_tensors() -> None:
    """Two KV cache groups (as a hybrid model's): each group's blocks move
    only the tensors of its layers."""
    w, engine, base, rs = make(1, [[Part(0, PAGES[0])], [Part(1, PAGES[1])]])
    w.submit_store(1, GPULoadStoreSpec([2, 3, 8], [2, 1], [0, 0]), CPULoadStoreSpec([0, 1, 2]))
    assert torch.equal(region_page(base, rs, 1, 0, 0, 0), engine[0][2])
    assert torch.equal(region_page(base, rs, 1, 0, 1, 0), engine[0][3])
    assert torch.equal(region_page(base, rs, 1, 1, 2, 0), engine[1][8])
    assert not region_page(base, rs, 1, 1, 0, 0).any() and not region_page(base, rs, 1, 0, 2, 0).any()


def test_partial_page_copies_only_the_layers_bytes() -> None:
    """A ref's unpadded page smaller than the tensor's: the padding is not moved."""
    w, engine, base, rs = make(1, [[Part(0, 40), Part(1, PAGES[1])]])
    w.submit_store(1, GPULoadStoreSpec([5], [1], [0]), CPULoadStoreSpec([3]))
    page = region_page(base, rs, 1, 0, 3, 0)
    assert torch.equal(page[:40], engine[0][5][:40]) and not page[40:].any()


@pytest.mark.parametrize("gpu,cpu", [
    (GPULoadStoreSpec([1, 2], [2], [0]), CPULoadStoreSpec([1])),  # fewer chunks than blocks
    (GPULoadStoreSpec([1], [1], [0]), CPULoadStoreSpec([1, 2])),  # more
    (GPULoadStoreSpec([1, 2], [1, 1], [0, 0]), CPULoadStoreSpec([1, 2])),  # two groups for one
])
def test_inconsistent_spec_is_refused(gpu: GPULoadStoreSpec, cpu: CPULoadStoreSpec) -> None:
    w, engine, base, _ = make(1)
    before = [e.clone() for e in engine]
    with pytest.raises(ValueError):
        w.submit_load(1, cpu, gpu)
    assert all(torch.equal(a, b) for a, b in zip(before, engine))
    assert w.get_finished() == []


def test_out_of_range_ids_raise_not_corrupt() -> None:
    w, engine, base, _ = make(1)
    with pytest.raises((IndexError, RuntimeError)):
        w.submit_store(1, GPULoadStoreSpec([1], [1], [0]), CPULoadStoreSpec([NUM_CHUNKS]))
    with pytest.raises((IndexError, RuntimeError)):
        w.submit_load(2, CPULoadStoreSpec([0]), GPULoadStoreSpec([NUM_BLOCKS], [1], [0]))
    assert not base.any()
