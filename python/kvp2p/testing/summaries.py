"""Peers' summaries made up for tests and benchmarks: a filter holding
given keys, and the SummaryUpdate parts a sidecar would send for it."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from kvp2p._pb import engine_pb2 as pb
from kvp2p.bloom import HASHES, PROBES, position
from kvp2p.summaries import FORMAT


def filter_of(keys: Iterable[bytes], size: int) -> npt.NDArray[np.uint64]:
    """A filter of `size` words holding `keys`."""
    w = np.zeros(size, np.uint64)
    for k in keys:
        for word, mask in position(k, size):
            w[word] |= np.uint64(mask)
    return w


def size_words(chunks: int) -> int:
    """The filter size of a tier of `chunks` chunks: 32 bits a chunk, a
    power of two words (Go's summary.SizeWords, below its bound)."""
    w = max(1, (32 * chunks + 63) // 64)
    return 1 << (w - 1).bit_length()


def random_filter(n: int, size: int, rng: np.random.Generator) -> npt.NDArray[np.uint64]:
    """A filter of `size` words holding `n` random keys, built from random
    positions directly: a key's words and bits are uniform and independent
    (kvp2p.bloom's mix), so this is filter_of(n random keys) in
    distribution, a hundred times faster."""
    w = np.zeros(size, np.uint64)
    for _ in range(PROBES):
        masks = np.zeros(n, np.uint64)
        for _ in range(HASHES):
            masks |= np.left_shift(np.uint64(1), rng.integers(0, 64, n, dtype=np.uint64))
        np.bitwise_or.at(w, rng.integers(0, size, n), masks)
    return w


def pack(words: npt.NDArray[np.uint64], idx: npt.NDArray[np.int64] | None = None) -> bytes:
    """SummaryUpdate.words_packed for the words at idx (default: the
    non-zero ones)."""
    if idx is None:
        idx = np.flatnonzero(words)
    pairs = np.zeros(len(idx), np.dtype([("i", "<u4"), ("v", "<u8")]))
    pairs["i"], pairs["v"] = idx, words[idx]
    return pairs.tobytes()


def snapshot(peer: str, words: npt.NDArray[np.uint64], *, epoch: int = 1, seq: int = 1,
             per_part: int = 16384) -> list[pb.SummaryUpdate]:
    """The parts of a snapshot of `words` (reset on the first, last on the
    last, at most per_part words each, all of update `seq`)."""
    idx = np.flatnonzero(words)
    chunks = [idx[i:i + per_part] for i in range(0, len(idx), per_part)] or [idx]
    return [pb.SummaryUpdate(peer=peer, format=FORMAT, reset=i == 0, last=i == len(chunks) - 1, epoch=epoch,
                             seq=seq, size=len(words), words_packed=pack(words, c))
            for i, c in enumerate(chunks)]
