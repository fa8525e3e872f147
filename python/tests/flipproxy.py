"""A loopback TCP proxy in front of a sidecar's peer port that can change
one byte on the wire: the corruption a bad NIC, cable or middlebox makes.

Armed, it flips one bit in the middle of the next large read it forwards
from the sidecar to a peer (a block chunk's payload on a data connection;
control messages are small), then disarms. Everything else passes
through unchanged.

The proxy runs in a process of its own (this file run as a script), told
what to do on its stdin. In the test's process its threads waited for the
interpreter's lock behind the test's own work: a Hello took up to 0.36 s
to cross it, past the consumer's handshake wait."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

_BIG = 2 << 10  # reads at least this large carry block bytes (control messages here are smaller)


class FlipProxy:
    """The test's handle on the proxy process."""

    def __init__(self, target_port: int) -> None:
        self._p = subprocess.Popen([sys.executable, __file__, str(target_port)], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True, bufsize=1)
        line = self._read()
        if not line.startswith("listening "):
            raise RuntimeError(f"flip proxy did not start: {line!r}")
        self.port = int(line.split()[1])
        self._mu = threading.Lock()

    def _read(self) -> str:
        assert self._p.stdout is not None
        return self._p.stdout.readline().strip()

    def _ask(self, cmd: str) -> str:
        assert self._p.stdin is not None
        with self._mu:
            self._p.stdin.write(cmd + "\n")
            self._p.stdin.flush()
            return self._read()

    def arm(self) -> None:
        self._ask("arm")

    def disarm(self) -> None:
        """Flips nothing more: a test that armed the proxy and whose load
        never ran must not leave the flip to the next test's load."""
        self._ask("disarm")

    @property
    def flipped(self) -> int:
        return int(self._ask("flipped"))

    def close(self) -> None:
        if self._p.poll() is None:
            self._p.kill()
        self._p.wait()
        for f in (self._p.stdin, self._p.stdout):
            if f:
                f.close()


class _Proxy:
    """The proxy itself, in its own process."""

    def __init__(self, target_port: int) -> None:
        self._ln = socket.create_server(("127.0.0.1", 0))
        self._target = target_port
        self._mu = threading.Lock()
        self._armed = False
        self.flipped = 0
        threading.Thread(target=self._accept, daemon=True, name="flipproxy").start()

    @property
    def port(self) -> int:
        return int(self._ln.getsockname()[1])

    def command(self, cmd: str) -> str:
        with self._mu:
            if cmd == "arm":
                self._armed = True
            elif cmd == "disarm":
                self._armed = False
            elif cmd == "flipped":
                return str(self.flipped)
            else:
                return f"unknown command {cmd!r}"
        return "ok"

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
                s.close()


def _main() -> None:
    p = _Proxy(int(sys.argv[1]))
    print(f"listening {p.port}", flush=True)
    for line in sys.stdin:  # EOF: the test is gone, and so is the proxy
        print(p.command(line.strip()), flush=True)


if __name__ == "__main__":
    _main()
