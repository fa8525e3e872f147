"""Finding a source with real `kvp2p serve` sidecars (find enabled): engine
C's request names no source, and loads A's blocks, found through the
summaries A's sidecar shares (docs/find.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from kvp2p.testing import Sidecar
from kvp2p.testing.fake_engine import FakeEngine, key
from kvp2p.tier import Verdict

Make = Callable[..., Sidecar]


@pytest.fixture
def fleet(sidecars: Make) -> Iterator[tuple[list[Sidecar], list[FakeEngine]]]:
    """Three sidecars that share summaries (find.peers: all three), each
    with an engine attached."""
    from kvp2p.testing.sidecar import free_port

    ports = [free_port() for _ in range(3)]
    members = ",".join(f"127.0.0.1:{p}" for p in ports)
    scs = [sidecars(n, port=p, extra=["--set", "find.enabled=true", "--set", f"find.peers={members}",
                                      "--set", "find.interval=100ms"])
           for n, p in zip("ABC", ports)]
    engines = [FakeEngine(sc) for sc in scs]
    try:
        for e in engines:
            e.wait_attached()
        yield scs, engines
    finally:
        for e in engines:
            e.close()


def test_a_request_naming_no_source_loads_from_the_peer_found(
        fleet: tuple[list[Sidecar], list[FakeEngine]]) -> None:
    (sa, _, sc), (a, b, c) = fleet
    seeds = [1, 2, 3, 4, 5]
    want = [a.put(s, chunk=i) for i, s in enumerate(seeds)]
    # vLLM's CPU tier stores them: the tier reports them, A's summary says so.
    a.core.submit_store(0, "w", [key(s) for s in seeds], list(range(len(seeds))))
    peer_a = f"127.0.0.1:{sa.port}"
    c.until(lambda: c.core.mirror.holders(key(seeds[0])) == [peer_a], peers=(a, b))
    # Nobody holds seed 99: MISS at once, no step.
    c.core.new_request("nobody", None)
    assert c.verdicts("nobody", [99]) == [Verdict.MISS]
    c.core.new_request("r", None)
    assert c.verdicts("r", seeds) == [Verdict.RETRY] * len(seeds)
    c.until(lambda: c.verdicts("r", seeds) == [Verdict.HIT] * len(seeds), peers=(a, b))
    dest = [40, 41, 42, 43, 44]
    c.core.submit_load(0, "r", [key(s) for s in seeds], dest)
    c.until(lambda: c.job(0) is not None, peers=(a, b))
    d = c.job(0)
    assert d is not None and d.success, d
    assert [c.region.read(x) for x in dest] == want
    assert c.core.take_counts().get("found_sources") == 1
    # C reports what it loaded: B finds both A and C hold the prefix now.
    peer_c = f"127.0.0.1:{sc.port}"
    b.until(lambda: sorted(b.core.mirror.holders(key(seeds[0]))) == sorted([peer_a, peer_c]), peers=(a, c))
    c.core.request_finished("r")
