"""Block keys on the engine API.

The API carries 16-byte keys (kvp2p's wire.Key). vLLM's OffloadKey is a
block hash (32 bytes by default) plus a 4-byte group index, so the plugin
maps it to 16 bytes with BLAKE2b: stable across processes and hosts (no
PYTHONHASHSEED dependence beyond the one vLLM's block hashes already have),
and wide enough that two blocks of a fleet colliding is not a concern.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

KEY_BYTES = 16


def key16(key: bytes) -> bytes:
    """The API key of an engine key (any length)."""
    return hashlib.blake2b(key, digest_size=KEY_BYTES).digest()


class KeyBook:
    """Remembers which engine key a 16-byte key stands for.

    A peer asks by 16-byte key; to pin the block the engine needs its own
    key back, and a hash cannot be inverted. The book is bounded (least
    recently remembered first out): a forgotten key only means a peer's
    lookup of it answers MISS.
    """

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError(f"KeyBook capacity {capacity}: must be positive")
        self._cap = capacity
        self._map: OrderedDict[bytes, bytes] = OrderedDict()

    def remember(self, k16: bytes, key: bytes) -> None:
        m = self._map
        if k16 in m:
            m.move_to_end(k16)
            return
        m[k16] = key
        if len(m) > self._cap:
            m.popitem(last=False)

    def get(self, k16: bytes) -> bytes | None:
        return self._map.get(k16)

    def __len__(self) -> int:
        return len(self._map)
