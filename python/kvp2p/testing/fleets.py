"""Several fleets (kvp2p.testing.fleet) on one machine at once: their engines
start together (the starts overlap), and the fleets not in use are frozen.

Why freeze: an idle engine with vLLM's own p2p tier spins (its tier always
reports work: about a core each), so two idle engines of one tier would take
both of a 2-core machine's cores from the other tier's measurement. SIGSTOP
of a fleet's engines and sidecars makes it take none. A thawed fleet's
sessions may need a request or two to settle (its peers' heartbeats stopped
too): callers warm up after a thaw before they measure.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kvp2p.testing.fleet import Fleet, Peer, Tier
from kvp2p.testing.real_engine import EngineConfig


@dataclass
class SizedPeer(Peer):
    """A fleet Peer whose engine takes other EngineConfig fields (e.g. a
    larger context and CPU tier for long prompts); the tier part is Peer's."""

    opts: dict[str, Any] = field(default_factory=dict)

    def config(self) -> EngineConfig:
        return dataclasses.replace(super().config(), **self.opts)


@dataclass(frozen=True)
class Spec:
    """One fleet: its name (in its engines' ids), tier, and vLLM's tier's
    engine environment (None: fleet.VLLM_TIER_ENV, UCX over TCP)."""

    name: str
    tier: Tier
    env: dict[str, str] | None = None


def start(specs: Sequence[Spec], model: str, tag: str, opts: dict[str, Any] | None = None,
          ready_s: float = 1800.0) -> dict[str, Fleet]:
    """One fleet per spec, by name; every engine is spawned before any is
    waited for (up to ready_s: on a busy 2-core machine four engines took
    over 10 minutes to start). opts: EngineConfig fields for every engine."""
    fleets: dict[str, Fleet] = {}
    try:
        for s in specs:
            kw: dict[str, Any] = {} if s.env is None else {"env": s.env}
            a = SizedPeer(f"{tag}-{s.name}-A", s.tier, model, opts=dict(opts or {}), **kw)
            b = SizedPeer(f"{tag}-{s.name}-B", s.tier, model, opts=dict(opts or {}), **kw)
            fleets[s.name] = Fleet(s.tier, a, b)
            a.spawn()
            b.spawn()
        for f in fleets.values():
            f.a.e.ready(ready_s)
            f.b.e.ready(ready_s)
    except BaseException:
        close(fleets)
        raise
    return fleets


def _signal(f: Fleet, sig: signal.Signals) -> None:
    for p in (f.a, f.b):
        if p.engine is not None and p.engine.proc.is_alive():
            os.killpg(p.engine.proc.pid, sig)
        if p.sidecar is not None and p.sidecar.proc is not None and p.sidecar.proc.poll() is None:
            p.sidecar.proc.send_signal(sig)


def freeze(f: Fleet) -> None:
    """SIGSTOP of the fleet's engines and sidecars: it takes no CPU."""
    _signal(f, signal.SIGSTOP)


def thaw(f: Fleet) -> None:
    _signal(f, signal.SIGCONT)


def close(fleets: dict[str, Fleet]) -> None:
    """Closes every fleet, frozen or not."""
    for f in fleets.values():
        with contextlib.suppress(OSError):
            thaw(f)
        f.close()
