"""Fixtures: real `kvp2p serve` sidecars on loopback (see kvp2p.testing)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kvp2p.testing import Sidecar, kvp2p_binary  # noqa: E402
from kvp2p.testing.pods import Pods  # noqa: E402

# These tests run from a source checkout: kvp2p.testing takes the binary from
# $KVP2P_BIN or PATH only, so point it at the checkout's `go build -o kvp2p
# ./cmd/kvp2p` when neither is set (scripts/test-python.sh sets KVP2P_BIN).
_CHECKOUT_BIN = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "kvp2p")
if "KVP2P_BIN" not in os.environ and os.access(_CHECKOUT_BIN, os.X_OK):
    os.environ["KVP2P_BIN"] = _CHECKOUT_BIN


@pytest.fixture
def sidecars() -> Iterator[Callable[..., Sidecar]]:
    """Starts sidecars; stops them (and removes their files) at the end."""
    try:
        kvp2p_binary()
    except FileNotFoundError as e:
        pytest.fail(str(e))
    made: list[Sidecar] = []

    def make(name: str, num_chunks: int = 64, row_stride: int = 4096, **kw: object) -> Sidecar:
        sc = Sidecar(name, num_chunks, row_stride, **kw)  # type: ignore[arg-type]
        made.append(sc)
        return sc.start()

    yield make
    for sc in made:
        sc.stop()
        for f in (sc.region_path, sc.socket):
            if os.path.exists(f):
                os.unlink(f)


@pytest.fixture(scope="module")
def pods(request: pytest.FixtureRequest) -> Iterator[Pods]:
    """A real-engine module's directory, tiny model, sidecars and engines
    (kvp2p.testing.pods), all ended after the module's last test."""
    try:
        p = Pods(prefix=f"kvp2p-{request.module.__name__.removeprefix('test_')}-")
    except FileNotFoundError as e:
        pytest.fail(str(e))
    with p:
        yield p
