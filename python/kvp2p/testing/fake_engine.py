"""An engine in miniature for the tests and benchmarks that do not need vLLM: a region, a
table of which chunk holds which key, and a TierCore driven step by step."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

from kvp2p._pb import engine_pb2 as pb
from kvp2p.keys import key16
from kvp2p.region import Region
from kvp2p.testing import Sidecar
from kvp2p.tier import Done, Kind, TierCore, Verdict


def block(seed: int, size: int) -> bytes:
    """Deterministic block bytes for a seed."""
    out = bytearray()
    h = hashlib.sha256(seed.to_bytes(8, "big")).digest()
    while len(out) < size:
        out += h
        h = hashlib.sha256(h).digest()
    return bytes(out[:size])


def key(seed: int) -> bytes:
    return key16(b"block-%d" % seed)


class FakeEngine:
    def __init__(self, sc: Sidecar, register_chunks: int | None = None, **core_opts: object) -> None:
        self.sc = sc
        self.region = sc.region()
        reg = pb.Register(api_version=pb.API_VERSION_1, engine_id=sc.name, region_path=sc.region_path,
                          num_chunks=register_chunks or sc.num_chunks, row_stride=sc.row_stride)
        self.core = TierCore(sc.socket, reg, **core_opts)  # type: ignore[arg-type]
        self.held: dict[bytes, int] = {}
        self.pinned: dict[int, list[int]] = {}  # pin job -> chunks
        self.done: list[Done] = []
        self._next_pin = 10_000
        self.core.start()

    def close(self) -> None:
        self.core.close()
        self.region.close()

    def wait_attached(self, timeout: float = 5.0) -> None:
        assert self.core.client.wait_attached(timeout), self.core.client.last_error

    def put(self, seed: int, chunk: int) -> bytes:
        """Writes a block into the region, as vLLM's worker would."""
        data = block(seed, self.sc.row_stride)
        self.region.write(chunk, data)
        self.held[key(seed)] = chunk
        return data

    def step(self) -> None:
        """One scheduler step: serve peers' asks, end the step, collect."""
        for ask in self.core.take_asks():
            ks = [k for k in dict.fromkeys(ask.keys) if k in self.held]
            if ks:
                self._next_pin += 1
                self.pinned[self._next_pin] = [self.held[k] for k in ks]
                self.core.grant(ask.ask_id, self._next_pin, ks, [self.held[k] for k in ks])
            else:
                self.core.grant(ask.ask_id, None, [], [])
        self.core.schedule_end()
        for d in self.core.take_finished():
            if d.kind == Kind.PIN:
                self.pinned.pop(d.job_id, None)
            self.done.append(d)

    def until(self, cond: Callable[[], bool], timeout: float = 10.0, peers: tuple["FakeEngine", ...] = ()) -> None:
        """Steps this engine (and peers) until cond holds."""
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; {self.sc.name} log:\n{self.sc.log()}")
            self.step()
            for p in peers:
                p.step()
            time.sleep(0.002)

    def job(self, job_id: int, kind: Kind = Kind.LOAD) -> Done | None:
        for d in self.done:
            if d.job_id == job_id and d.kind == kind:
                return d
        return None

    def verdicts(self, req: str, seeds: list[int]) -> list[Verdict]:
        return [self.core.lookup(req, key(s)) for s in seeds]
