"""Where a block key lives in a peer's summary (docs/find.md, "The
summary"): the blocked Bloom filter the sidecars exchange, as Go's
internal/summary.Position computes it. A key sets 6 bits in each of two
64-bit words, so a test reads two words.
"""

from __future__ import annotations

_M64 = (1 << 64) - 1
_SEED_A = 0x9E3779B97F4A7C15
_SEED_B = 0x243F6A8885A308D3

PROBES = 2  # words a key sets bits in
HASHES = 6  # bits it sets in each


def _mix(x: int) -> int:
    """splitmix64's finaliser, modulo 2^64."""
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _bits(h: int) -> int:
    mask = 0
    for i in range(HASHES):
        mask |= 1 << ((h >> (6 * i)) & 63)
    return mask


def position(key: bytes, words: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The two words of a filter of `words` words (a power of two) that
    hold the 16-byte `key`, and the mask of its six bits in each:
    ((word0, mask0), (word1, mask1)). The words may coincide."""
    a = _mix(int.from_bytes(key[0:8], "little") ^ _SEED_A)
    b = _mix(int.from_bytes(key[8:16], "little") ^ a ^ _SEED_B)
    c = _mix(b ^ _SEED_A)
    return (a & (words - 1), _bits(b)), ((a >> 32) & (words - 1), _bits(c))
