"""A loopback TCP proxy in front of a sidecar's peer port that can change
one byte on the wire: the corruption a bad NIC, cable or middlebox makes.

Armed, it flips one bit in the middle of the next large read it forwards
from the sidecar to a peer (a block chunk's payload on a data connection;
control messages are small), then disarms. Everything else passes
through unchanged."""

from __future__ import annotations

import socket
import threading

_BIG = 2 << 10  # reads at least this large carry block bytes (control messages here are smaller)


class FlipProxy:
    def __init__(self, listen_port: int, target_port: int) -> None:
        self._ln = socket.create_server(("127.0.0.1", listen_port))
        self._target = target_port
        self._mu = threading.Lock()
        self._armed = False
        self.flipped = 0
        self._conns: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="flipproxy").start()

    def arm(self) -> None:
        with self._mu:
            self._armed = True

    def disarm(self) -> None:
        """Flips nothing more: a test that armed the proxy and whose load
        never ran must not leave the flip to the next test's load."""
        with self._mu:
            self._armed = False

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self._ln.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(("127.0.0.1", self._target))
            except OSError:
                c.close()
                continue
            for s in (c, up):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._mu:
                self._conns += [c, up]
            threading.Thread(target=self._pump, args=(c, up, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, c, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_target: bool) -> None:
        buf = bytearray(256 << 10)
        view = memoryview(buf)
        try:
            while True:
                n = src.recv_into(buf)
                if n == 0:
                    break
                if from_target and n >= _BIG:
                    with self._mu:
                        if self._armed:
                            buf[n // 2] ^= 0x10
                            self._armed = False
                            self.flipped += 1
                dst.sendall(view[:n])
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._ln.close()
        with self._mu:
            conns, self._conns = self._conns, []
        for s in conns:
            try:
                s.close()
            except OSError:
                pass
