"""Chunks the engine lent to peers, and how long they stay lent after the
sidecar they were lent through is lost.

Pure: no lock, no thread, no I/O; times are arguments and whether a
process has exited is the caller's finding. TierState owns one.

A grant's chunks are lent under an API pin id until the sidecar releases
it. When the sidecar is lost they are held: a sidecar that is alive but
frozen may still be sending one to a peer once it runs again, so the chunk
must not change under it. They are freed when a sidecar registers again
(it refuses that while an old chunk is in use) or when the lost sidecar's
process has exited; only when the process is unknown (no step socket)
after `grant_hold` seconds, which a longer freeze outlasts.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from kvp2p.client import SidecarProcess


class Lent:
    """Pin ids lent to peers: through the attached sidecar, or held since
    the loss of an earlier one."""

    def __init__(self, grant_hold: float) -> None:
        self._grants: set[int] = set()  # through the attached sidecar
        # Lent through a lost sidecar -> when it was lost, and its process if known.
        self._held: dict[int, tuple[float, SidecarProcess | None]] = {}
        self._warned: set[SidecarProcess] = set()  # told once: alive past grant_hold
        self._grant_hold = grant_hold

    def lend(self, pin: int) -> None:
        self._grants.add(pin)

    def release(self, pins: Iterable[int]) -> list[int]:
        """The attached sidecar gave `pins` back: those lent are freed and returned."""
        freed = []
        for pin in pins:
            if pin in self._grants:
                self._grants.discard(pin)
                freed.append(pin)
        return freed

    def lose(self, now: float, proc: SidecarProcess | None) -> None:
        """The sidecar (its process `proc`, if known) was lost at `now`."""
        for pin in self._grants:
            self._held[pin] = (now, proc)
        self._grants.clear()

    def attached(self) -> list[int]:
        """A sidecar registered: every held pin is free, and returned."""
        freed = list(self._held)
        self._held.clear()
        self._warned.clear()
        return freed

    def processes(self) -> set[SidecarProcess]:
        """The processes of lost sidecars whose chunks are held."""
        return {proc for _, proc in self._held.values() if proc is not None}

    def release_held(self, now: float,
                     gone: Collection[SidecarProcess]) -> tuple[list[int], list[tuple[SidecarProcess, float]]]:
        """Frees the held pins whose sidecar's process is `gone` (exited),
        or, the process unknown, `grant_hold` after the loss. Returns them,
        and the processes newly found alive past grant_hold (and how long
        since their loss), to be told once: frozen, most likely."""
        freed: list[int] = []
        overdue: list[tuple[SidecarProcess, float]] = []
        for pin, (lost_at, proc) in list(self._held.items()):
            if proc is None:
                free = now - lost_at >= self._grant_hold
            else:
                free = proc in gone
                if not free and now - lost_at >= self._grant_hold and proc not in self._warned:
                    self._warned.add(proc)
                    overdue.append((proc, now - lost_at))
            if free:
                del self._held[pin]
                freed.append(pin)
        if not self._held:
            self._warned.clear()
        return freed, overdue

    def lent(self) -> int:
        """Pins lent through the attached sidecar."""
        return len(self._grants)

    def held(self) -> int:
        """Pins lent through a lost sidecar, not freed yet."""
        return len(self._held)
