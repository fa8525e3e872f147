"""The engine's KV region: a shared-memory file, chunk b at b * row_stride.

vLLM's CPU tier keeps it at /dev/shm/vllm_offload_{engine_id}.mmap. The
sidecar maps the same file; these helpers are for tests, benchmarks and
tools that play the engine's part (writing blocks as vLLM's worker would).
"""

from __future__ import annotations

import mmap
import os


def vllm_region_path(engine_id: str, shm_dir: str = "/dev/shm") -> str:
    """Where vLLM's CPU tier puts an engine's region."""
    return os.path.join(shm_dir, f"vllm_offload_{engine_id}.mmap")


class Region:
    """A mapped region of num_chunks chunks of row_stride bytes."""

    def __init__(self, path: str, num_chunks: int, row_stride: int, *, create: bool = False) -> None:
        if num_chunks <= 0 or row_stride <= 0:
            raise ValueError(f"region of {num_chunks} chunks of {row_stride} bytes")
        self.path = path
        self.num_chunks = num_chunks
        self.row_stride = row_stride
        size = num_chunks * row_stride
        if create:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
            try:
                os.ftruncate(fd, size)
            except BaseException:
                os.close(fd)
                os.unlink(path)
                raise
        else:
            fd = os.open(path, os.O_RDWR)
        try:
            have = os.fstat(fd).st_size
            if have < size:
                raise ValueError(f"{path} is {have} bytes; {num_chunks} chunks of {row_stride} need {size}")
            self._mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)  # the mapping outlives the descriptor
        self._view = memoryview(self._mm)

    def _span(self, chunk: int) -> slice:
        if not 0 <= chunk < self.num_chunks:
            raise IndexError(f"chunk {chunk} out of range [0,{self.num_chunks})")
        start = chunk * self.row_stride
        return slice(start, start + self.row_stride)

    def chunk(self, chunk: int) -> memoryview:
        """A writable view of one chunk (no copy)."""
        return self._view[self._span(chunk)]

    def write(self, chunk: int, data: bytes) -> None:
        if len(data) != self.row_stride:
            raise ValueError(f"{len(data)} bytes for a chunk of {self.row_stride}")
        self._view[self._span(chunk)] = data

    def read(self, chunk: int) -> bytes:
        return bytes(self._view[self._span(chunk)])

    def close(self) -> None:
        self._view.release()
        self._mm.close()

    def __enter__(self) -> "Region":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
