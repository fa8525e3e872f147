"""The thread that keeps an engine's SummaryMirror (kvp2p.summaries) as
the sidecar's WatchSummaries stream says: one small thread of its own,
never vLLM's scheduler thread, never under the tier's lock.

While the engine is attached it watches the registration's summaries and
files every part in the mirror; when the stream ends (the sidecar lost,
detached, or ended a watcher that fell behind) it forgets every peer and
watches again, and the new stream starts with snapshots. A sidecar with
find off answers UNIMPLEMENTED: `on_find(False)` is called (the tier then
stops reporting its stores) and the watcher asks again only after a new
registration (`on_find(True)` once a stream opens).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc

from kvp2p.client import EngineClient
from kvp2p.summaries import SummaryMirror

log = logging.getLogger("kvp2p.watch")


class SummaryWatcher:
    """Feeds `mirror` from `client`'s sidecar."""

    def __init__(self, client: EngineClient, mirror: SummaryMirror, on_find: Callable[[bool], None], *,
                 retry_interval: float = 0.2, clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._mirror = mirror
        self._on_find = on_find
        self._retry = retry_interval
        self._clock = clock
        self._closed = threading.Event()
        self._mu = threading.Lock()
        self._call: Any = None  # the open stream, to cancel on close
        self._thread = threading.Thread(target=self._run, name="kvp2p-summaries", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        with self._mu:
            call = self._call
        if call is not None:
            call.cancel()
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)

    def _run(self) -> None:
        off_for = 0  # the registration that said find is off
        while not self._closed.is_set():
            reg = self._client.registration
            if not reg or reg == off_for:
                if not reg:
                    self._client.wait_attached(self._retry)
                self._closed.wait(self._retry)
                continue
            opened = self._client.watch_summaries()
            if opened is None:
                continue
            reg, call = opened
            with self._mu:
                self._call = call
            if self._closed.is_set():
                call.cancel()
            try:
                first = True
                for u in call:
                    if first:
                        self._on_find(True)
                        first = False
                    self._mirror.apply(u, self._clock())
            except grpc.RpcError as e:
                code = e.code()  # type: ignore[attr-defined]
                if code == grpc.StatusCode.UNIMPLEMENTED:
                    log.info("kvp2p: the sidecar has find off: no source is found for requests naming none")
                    self._on_find(False)
                    off_for = reg
                elif code != grpc.StatusCode.CANCELLED:
                    log.debug("kvp2p: summary stream ended: %s", e)
            except Exception:  # noqa: BLE001 - a bad update must not end finding for the process
                log.exception("kvp2p: summary stream failed; watching again")
                call.cancel()
            finally:
                with self._mu:
                    self._call = None
                self._mirror.clear()
            self._closed.wait(self._retry)
