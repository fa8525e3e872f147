"""Kvp2pTier with made-up peers' summaries in its mirror, for benchmarks
only: what finding costs a real engine's scheduler when many peers' full
summaries are loaded, without running that many sidecars.

vLLM loads it as it loads Kvp2pTier, with three more options:

    "secondary_tiers": [{"type": "SyntheticPeersTier",
                         "module_path": "kvp2p.testing.synthetic_peers",
                         "socket": "...", "peers": 1000, "fill": 8192, "chunks": 8192}]

Everything but the mirror's source is the production tier: the same
lookups, TierState, worker and sidecar. The source is a fake of the
sidecar's WatchSummaries stream: a thread of its own files a snapshot of
each of `peers` filters (the size a tier of `chunks` chunks gets, holding
`fill` random keys: random_filter), then an empty delta per peer every
`interval` seconds, as a sidecar does, so that the summaries stay fresh
(find_max_age_s). Run the tier's sidecar with find enabled and no
members: its stream then stays open and sends nothing, so this thread is
the mirror's only writer (a stream that ended would clear the mirror:
the thread then files the snapshots again).

It also counts the requests whose first lookup answered RETRY (those wait
a scheduler step) and prints the count to stderr every 10 s while it
changes: vLLM's own lookup metrics are histograms of delays.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from kvp2p._pb import engine_pb2 as pb
from kvp2p.summaries import FORMAT, SummaryMirror
from kvp2p.testing.summaries import random_filter, size_words, snapshot
from kvp2p.vllm import Kvp2pTier

if TYPE_CHECKING:
    from vllm.v1.kv_offload.base import LookupResult, OffloadKey, ReqContext

log = logging.getLogger("kvp2p.testing.synthetic_peers")


class SyntheticPeers:
    """The fake WatchSummaries source: `peers` summaries kept fresh in
    `mirror`."""

    def __init__(self, mirror: SummaryMirror, peers: int, fill: int, size: int, *, seed: int = 1,
                 interval: float = 1.0, tag: str = "") -> None:
        self._mirror = mirror
        self._tag = tag
        self.requests = 0  # requests looked up (the tier's scheduler thread writes these)
        self.retried = 0  # of them, those whose first lookup answered RETRY
        self._interval = interval
        rng = np.random.default_rng(seed)
        self._names = [f"10.{p // 65536}.{p // 256 % 256}.{p % 256}:7777" for p in range(peers)]
        self._filters = [random_filter(fill, size, rng) for _ in range(peers)]
        self._seq = 0
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kvp2p-synthetic-peers", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=2.0)

    def _snapshots(self) -> None:
        self._seq += 1
        for name, words in zip(self._names, self._filters):
            for u in snapshot(name, words, seq=self._seq):
                self._mirror.apply(u, time.monotonic())

    def _run(self) -> None:
        self._snapshots()
        log.info("kvp2p: %d synthetic peers' summaries loaded", len(self._names))
        said, last = (-1, -1), time.monotonic()
        while not self._closed.wait(self._interval):
            if time.monotonic() - last >= 10 and (self.requests, self.retried) != said:
                said, last = (self.requests, self.retried), time.monotonic()
                print(f"[{self._tag}] synthetic peers: {said[1]} of {said[0]} requests' first lookup answered RETRY",
                      file=sys.stderr, flush=True)
            if len(self._mirror) < len(self._names):
                self._snapshots()
                continue
            self._seq += 1
            now = time.monotonic()
            for name, words in zip(self._names, self._filters):
                self._mirror.apply(pb.SummaryUpdate(peer=name, format=FORMAT, last=True, epoch=1, seq=self._seq,
                                                    size=len(words)), now)


class SyntheticPeersTier(Kvp2pTier):
    """Kvp2pTier whose mirror holds `peers` made-up summaries (see above)."""

    def __init__(self, *args: Any, peers: int = 1000, fill: int = 8192, chunks: int = 8192, seed: int = 1,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.synthetic = SyntheticPeers(self.core.mirror, peers, fill, size_words(chunks), seed=seed,
                                        tag=self.region_path)
        self._seen: set[str] = set()
        self.synthetic.start()

    def lookup(self, key: "OffloadKey", req_context: "ReqContext") -> "LookupResult":
        res = super().lookup(key, req_context)
        if req_context.req_id not in self._seen:
            self._seen.add(req_context.req_id)
            self.synthetic.requests += 1
            self.synthetic.retried += res.name == "RETRY"
        return res

    def on_request_finished(self, req_context: "ReqContext") -> None:
        self._seen.discard(req_context.req_id)
        super().on_request_finished(req_context)

    def shutdown(self) -> None:
        self.synthetic.close()
        super().shutdown()
