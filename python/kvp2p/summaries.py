"""The engine's copy of its peers' summaries (docs/find.md): what each
peer's CPU tier probably holds, as the sidecar's WatchSummaries stream
sends it, kept in memory so that a request naming no source finds one with
no socket round trip.

SummaryMirror is thread-free: `apply` files one SummaryUpdate, `advance`
moves its clock (a summary not updated for `max_age` is not used), and the
read methods (`holders`, `holds`, `usable`) answer from memory. One thread
writes (apply, advance, clear: the watcher, kvp2p.watch); the scheduler's
thread reads concurrently, without a lock. That is safe in the GIL's
sense: a peer's filter is a row of a stacked array written in place, and
a group is replaced by one assignment when it grows, so a reader sees
either copy whole, or a part half-applied. A Bloom filter read in the
middle of a part can only answer as the old or the new summary would for
that key, and the peer's own answer (the symmetric lookup) decides
anyway.

Peers whose filters have one size are stacked (one row each) so that a key
is tested against all of them at once: `(W[w0] & m0) == m0` and the same
for its second word (kvp2p.bloom), W holding word i of every peer in row
i. A
bitwise OR of the filters would not do: at 1,000 full filters nearly every
bit is set.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvp2p._pb import engine_pb2 as pb
from kvp2p.bloom import position

FORMAT = 2  # the only summary format read (SummaryUpdate.format; Go's summary.Format)
MAX_WORDS = 1 << 24  # a filter bigger than this (128 MiB) is refused
_PAIR = np.dtype([("i", "<u4"), ("v", "<u8")])  # SummaryUpdate.words_packed


@dataclass(slots=True)
class _Group:
    """The peers whose filters have `size` words, one row each."""

    size: int
    # size x rows: the word of every peer at one index is contiguous, so a
    # key's probe across all peers reads one run of memory.
    words: npt.NDArray[np.uint64]
    ready: npt.NDArray[np.bool_]  # a last part was applied since the reset
    updated: npt.NDArray[np.float64]  # when the row was last updated
    names: list[str | None]  # row -> peer (None: a free row)


@dataclass(slots=True)
class _Peer:
    size: int
    row: int
    epoch: int = 0
    seq: int = 0
    ok: bool = False  # a whole update applied, and none refused since
    partial: bool = False  # parts of update seq applied, its last not yet
    broken: bool = False  # a part refused: left out until the next reset


@dataclass(slots=True)
class MirrorCounts:
    applied: int = 0  # parts applied
    refused: int = 0  # parts refused (format, size, order, indices)
    gone: int = 0  # peers the sidecar dropped


class SummaryMirror:
    """Every peer's summary, as the sidecar holds it."""

    def __init__(self, *, max_age: float = 3.0) -> None:
        self._max_age = max_age
        self._cutoff = float("-inf")  # summaries updated before this are stale
        self._groups: dict[int, _Group] = {}
        self._peers: dict[str, _Peer] = {}
        self.counts = MirrorCounts()

    # -- the writer ------------------------------------------------------

    def apply(self, u: pb.SummaryUpdate, now: float) -> bool:
        """Files one part (or a peer's end); False when it was refused, and
        the peer is then left out until its next snapshot."""
        if u.gone:
            self.counts.gone += 1
            self._drop(u.peer)
            return True
        size = u.size
        if u.format != FORMAT or size == 0 or size & (size - 1) or size > MAX_WORDS or len(u.words_packed) % 12:
            return self._refuse(u.peer)
        pairs = np.frombuffer(u.words_packed, dtype=_PAIR)
        if len(pairs) and int(pairs["i"].max()) >= size:
            return self._refuse(u.peer)
        p = self._peers.get(u.peer)
        if u.reset:
            if p is None or p.size != size:
                self._drop(u.peer)
                p = self._place(u.peer, size)
            g = self._groups[size]
            g.ready[p.row] = False
            g.words[:, p.row] = 0
            p.epoch, p.seq, p.ok, p.broken = u.epoch, u.seq, False, False
        elif (p is None or p.broken or p.size != size or u.epoch != p.epoch
              or not (p.partial and u.seq == p.seq or p.ok and not p.partial and u.seq == p.seq + 1)):
            # As Go's summary.Index: parts of one update share its seq; an
            # update follows the one before it, in the same epoch.
            return self._refuse(u.peer)
        else:
            g = self._groups[size]
        p.seq = u.seq
        g.words[pairs["i"], p.row] = pairs["v"]
        p.partial = not u.last
        if u.last:  # a whole snapshot, or a whole delta on top of one
            p.ok = True
            g.updated[p.row] = now
            g.ready[p.row] = True
        self.counts.applied += 1
        return True

    def advance(self, now: float) -> None:
        """The time is now: a summary not updated for max_age is unused."""
        self._cutoff = now - self._max_age

    def clear(self) -> None:
        """Forgets every peer (the stream ended: a new one starts with
        snapshots)."""
        self._groups = {}
        self._peers = {}

    # -- the readers ------------------------------------------------------

    def __len__(self) -> int:
        return len(self._peers)

    def peers(self) -> list[str]:
        return list(self._peers)

    def holders(self, key: bytes) -> list[str]:
        """The usable peers whose summaries probably hold `key`."""
        out: list[str] = []
        cutoff = self._cutoff
        for g in list(self._groups.values()):
            (w0, m0), (w1, m1) = position(key, g.size)
            a, b = np.uint64(m0), np.uint64(m1)
            hit = ((g.words[w0] & a) == a) & ((g.words[w1] & b) == b) & g.ready & (g.updated >= cutoff)
            names = g.names
            out.extend(n for n in (names[int(r)] for r in np.flatnonzero(hit)) if n is not None)
        return out

    def holds(self, peer: str, key: bytes) -> bool:
        """Whether `peer`'s usable summary probably holds `key`."""
        p = self._peers.get(peer)
        if p is None or p.broken:
            return False
        g = self._groups.get(p.size)
        if g is None or p.row >= len(g.names) or g.names[p.row] != peer:
            return False
        if not g.ready[p.row] or g.updated[p.row] < self._cutoff:
            return False
        (w0, m0), (w1, m1) = position(key, g.size)
        return int(g.words[w0, p.row]) & m0 == m0 and int(g.words[w1, p.row]) & m1 == m1

    def fill(self, peer: str) -> int:
        """How many words of peer's filter are non-zero (0: unknown peer)."""
        p = self._peers.get(peer)
        g = self._groups.get(p.size) if p is not None else None
        if p is None or g is None or p.row >= len(g.names) or g.names[p.row] != peer:
            return 0  # unknown, or its row was rebuilt under us (clear)
        return int(np.count_nonzero(g.words[:, p.row]))

    def usable(self, peer: str) -> bool:
        """Whether `peer`'s summary may be used (held whole, and fresh)."""
        p = self._peers.get(peer)
        if p is None or p.broken:
            return False
        g = self._groups.get(p.size)
        if g is None or p.row >= len(g.names) or g.names[p.row] != peer:
            return False  # its row was rebuilt under us (clear)
        return bool(g.ready[p.row]) and g.updated[p.row] >= self._cutoff

    # -- helpers ------------------------------------------------------------

    def _refuse(self, peer: str) -> bool:
        self.counts.refused += 1
        p = self._peers.get(peer)
        if p is not None:
            p.broken, p.ok, p.partial = True, False, False
            self._groups[p.size].ready[p.row] = False
        return False

    def _drop(self, peer: str) -> None:
        p = self._peers.pop(peer, None)
        if p is None:
            return
        g = self._groups[p.size]
        g.ready[p.row] = False
        g.names[p.row] = None

    def _place(self, peer: str, size: int) -> _Peer:
        """A row for peer in the group of `size`: a free one, or a new one
        (the group doubles, replaced by one assignment)."""
        g = self._groups.get(size)
        if g is None:
            g = _Group(size, np.zeros((size, 1), np.uint64), np.zeros(1, np.bool_), np.zeros(1), [None])
            self._groups[size] = g
        try:
            row = g.names.index(None)
        except ValueError:
            n = len(g.names)
            words = np.zeros((size, 2 * n), np.uint64)
            words[:, :n] = g.words
            ready = np.zeros(2 * n, np.bool_)
            ready[:n] = g.ready
            updated = np.zeros(2 * n)
            updated[:n] = g.updated
            g = _Group(size, words, ready, updated, g.names + [None] * n)
            self._groups[size] = g
            row = n
        g.names[row] = peer
        p = _Peer(size, row)
        self._peers[peer] = p
        return p
