"""Where a block key lives in a peer's summary (docs/find.md, "The
summary"): the blocked Bloom filter the sidecars exchange, as Go's
internal/summary.Position computes it. A key sets 6 bits of one 64-bit
word, so a test reads one word.
"""

from __future__ import annotations

_M64 = (1 << 64) - 1


def _mix(x: int) -> int:
    """splitmix64's finaliser, modulo 2^64."""
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def position(key: bytes, words: int) -> tuple[int, int]:
    """The word of a filter of `words` words (a power of two) that holds
    the 16-byte `key`, and the mask of its six bits."""
    a = _mix(int.from_bytes(key[0:8], "little") ^ 0x9E3779B97F4A7C15)
    b = _mix(int.from_bytes(key[8:16], "little") ^ a ^ 0x243F6A8885A308D3)
    mask = 0
    for i in range(6):
        mask |= 1 << ((b >> (6 * i)) & 63)
    return a & (words - 1), mask
