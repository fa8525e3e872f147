"""Peers' summaries made up for tests and benchmarks: a filter holding
given keys, and the SummaryUpdate parts a sidecar would send for it."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from kvp2p._pb import engine_pb2 as pb
from kvp2p.bloom import position
from kvp2p.summaries import FORMAT


def filter_of(keys: Iterable[bytes], size: int) -> npt.NDArray[np.uint64]:
    """A filter of `size` words holding `keys`."""
    w = np.zeros(size, np.uint64)
    for k in keys:
        for word, mask in position(k, size):
            w[word] |= np.uint64(mask)
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
