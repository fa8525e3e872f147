"""The engine API as plain Python calls.

EngineClient keeps one engine attached to its sidecar: a supervisor thread
dials, sends Register on the Attach stream and reads the sidecar's messages
(ServeAsk, ServeRelease, Ping) for as long as the stream lives; a ticker
thread pings the sidecar and declares it gone when it has been silent for
`dead_after` seconds (the stream's end on a crash is noticed at once; a
sidecar whose process is runnable, starved of CPU rather than frozen, gets
up to four times that). When
the sidecar is lost, `on_lost` runs once, then the client keeps redialing
until the sidecar is back and registers again (a new registration).

`step()` is the one blocking call; the tier plugin makes it from its own
worker thread, never from vLLM's scheduler. A step whose answer has not
come within `step_timeout` is waited for on while the sidecar is still
heard from (its pings), up to `step_limit`: a sidecar starved of CPU is
slow, not gone, and dropping it would fail every request in flight. It
goes over the sidecar's step socket when the sidecar names one in
Registered (the same StepRequest and StepResponse, length-prefixed on a
plain Unix socket: a tenth of a gRPC call's cost in Python), else over the
Step RPC.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from kvp2p._pb import engine_pb2 as pb
from kvp2p._pb import engine_pb2_grpc as pb_grpc

log = logging.getLogger("kvp2p.client")

_MAX_MSG = 8 << 20  # a step of 64k keys (the sidecar's limit) fits
_SLICE = 0.1  # a step's wait is checked this often once past step_timeout
# A sidecar silent past dead_after but runnable (starved of CPU) is given
# up to this many times dead_after before it is taken for hung.
_STARVED_GRACE = 4


class SidecarUnavailable(Exception):
    """The sidecar is not attached (down, restarting, or refusing us)."""


class StepRefused(Exception):
    """The sidecar refused a step (INVALID_ARGUMENT, RESOURCE_EXHAUSTED, ...).

    Nothing of the step was applied.
    """

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


def target_of(socket_or_target: str) -> str:
    """A gRPC target from a Unix socket path or a target string."""
    if socket_or_target.startswith(("unix:", "dns:", "ipv4:", "ipv6:")):
        return socket_or_target
    if socket_or_target.startswith("/"):
        return "unix:" + socket_or_target
    return socket_or_target  # host:port


_CODES = {c.value[0]: c for c in grpc.StatusCode}
_LEN = struct.Struct("<I")
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def _stat_fields(path: str) -> list[str]:
    """The fields of a /proc stat file after the command name (field 3
    on), or [] if it cannot be read."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def proc_stat(pid: int) -> tuple[str, str] | None:
    """A process's state letter and start time (/proc/pid/stat fields 3
    and 22), or None if there is no such process."""
    fields = _stat_fields(f"/proc/{pid}/stat")
    return (fields[0], fields[19]) if len(fields) > 19 else None


@dataclass(frozen=True)
class SidecarProcess:
    """The sidecar's process, from the step socket's peer credentials
    (SO_PEERCRED, Linux): its pid and start time, which tell it apart from
    a later process given the same pid."""

    pid: int
    start: str

    @classmethod
    def of(cls, sock: socket.socket) -> "SidecarProcess | None":
        try:
            pid, _, _ = _CRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))
        except (AttributeError, OSError):  # not Linux, or not a Unix socket
            return None
        st = proc_stat(pid) if pid > 0 else None
        return cls(pid, st[1]) if st is not None else None

    def runnable(self) -> bool:
        """True if one of its threads is running or waiting for a CPU
        (state R): a process starved of CPU, not a frozen or idle one."""
        try:
            tids = os.listdir(f"/proc/{self.pid}/task")
        except OSError:
            return False
        return any(_stat_fields(f"/proc/{self.pid}/task/{tid}/stat")[:1] == ["R"] for tid in tids)

    def gone(self) -> bool:
        """True once the process has exited: nothing of it can still read
        the region. A stopped (frozen) process is not gone."""
        st = proc_stat(self.pid)
        return st is None or st[0] in ("Z", "X") or st[1] != self.start


class StepSocket:
    """A connection to the sidecar's step socket (engine.proto, Registered.step_socket).

    Not thread-safe: EngineClient serializes its use.
    """

    def __init__(self, path: str, timeout: float) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.settimeout(timeout)
            self.sock.connect(path)
            # Waits go in slices, so that a slow answer can be waited for
            # on while the sidecar is alive (call's `wait_on`).
            self.sock.settimeout(min(timeout, _SLICE))
        except OSError:
            self.sock.close()
            raise
        self.hdr = bytearray(4)
        self.sidecar = SidecarProcess.of(self.sock)

    def call(self, payload: bytes, timeout: float, wait_on: Callable[[float], bool]) -> tuple[int, bytes]:
        """One round trip: the answer's status code and body. Past
        `timeout` seconds without the whole answer, it goes on waiting for
        as long as `wait_on(seconds waited)` says so; then TimeoutError."""
        t0 = time.monotonic()
        data = memoryview(_LEN.pack(len(payload)) + payload)
        while data:
            data = data[self._io(lambda: self.sock.send(data), t0, timeout, wait_on):]
        self._fill(memoryview(self.hdr), t0, timeout, wait_on)
        (n,) = _LEN.unpack(self.hdr)
        if n == 0:
            raise OSError("empty step answer")
        body = bytearray(n)
        self._fill(memoryview(body), t0, timeout, wait_on)
        return body[0], bytes(body[1:])

    def _fill(self, mv: memoryview, t0: float, timeout: float, wait_on: Callable[[float], bool]) -> None:
        while mv:
            got = self._io(lambda: self.sock.recv_into(mv), t0, timeout, wait_on)
            if got == 0:
                raise OSError("step socket closed by the sidecar")
            mv = mv[got:]

    @staticmethod
    def _io(op: Callable[[], int], t0: float, timeout: float, wait_on: Callable[[float], bool]) -> int:
        while True:
            try:
                return op()
            except TimeoutError:
                waited = time.monotonic() - t0
                if waited >= timeout and not wait_on(waited):
                    raise

    def close(self) -> None:
        self.sock.close()


class _Session:
    """One attached stream."""

    def __init__(self, channel: grpc.Channel, stub: pb_grpc.EngineStub, registered: pb.Registered,
                 out: "queue.SimpleQueue[pb.EngineMessage | None]", call: grpc.Future,
                 steps: StepSocket | None = None, *, now: float) -> None:
        self.channel = channel
        self.stub = stub
        self.registered = registered
        self.out = out
        self.call = call
        self.steps = steps
        self.heard = now
        self.pinged = now
        self.seq = 0
        self.slow_step_logged = False
        self.starved_logged = False


class EngineClient:
    """Attaches an engine to its sidecar and carries its steps."""

    def __init__(
        self,
        target: str,
        register: pb.Register,
        *,
        on_ask: Callable[[pb.ServeAsk], None],
        on_release: Callable[[Sequence[int]], None],
        on_lost: Callable[[str], None],
        on_attached: Callable[[pb.Registered], None] | None = None,
        ping_interval: float = 0.25,
        dead_after: float = 0.75,
        retry_interval: float = 0.2,
        step_timeout: float = 1.0,
        step_limit: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        ticker: bool = True,
    ) -> None:
        """`clock` is the time the silence is measured in; with `ticker`
        off no thread checks it, and the caller calls `tick()` instead
        (a test that drives time itself)."""
        self._target = target_of(target)
        self._register = register
        self._on_ask = on_ask
        self._on_release = on_release
        self._on_lost = on_lost
        self._on_attached = on_attached
        self._ping_interval = ping_interval
        self._dead_after = dead_after
        self._retry_interval = retry_interval
        self._step_timeout = step_timeout
        self._step_limit = max(step_limit, step_timeout)
        self._clock = clock
        self._last_tick = clock()
        # Why the last attachment ended, if the silence check ended it:
        # (when, in clock time; the silence it measured).
        self.silence_drop: tuple[float, float] | None = None
        # The process of the sidecar last attached, when the step socket
        # named it: kept after the attachment ends, for on_lost to read.
        self.sidecar: SidecarProcess | None = None
        self._mu = threading.Lock()
        self._step_mu = threading.Lock()  # one step at a time on the step socket
        self._sess: _Session | None = None
        self._attached = threading.Event()
        self._closed = threading.Event()
        self.last_error: str = ""
        self._refusal: str = ""  # the last refusal logged, so a retry loop logs it once
        self._threads = [
            threading.Thread(target=self._supervise, name="kvp2p-attach", daemon=True),
        ]
        if ticker:
            self._threads.append(threading.Thread(target=self._tick, name="kvp2p-ping", daemon=True))

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def close(self) -> None:
        """Detach and stop; the sidecar then fails whatever is in flight."""
        self._closed.set()
        with self._mu:
            s = self._sess
        if s is not None:
            s.call.cancel()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=2.0)

    @property
    def registration(self) -> int:
        s = self._sess
        return s.registered.registration if s is not None else 0

    @property
    def registered(self) -> pb.Registered | None:
        s = self._sess
        return s.registered if s is not None else None

    def wait_attached(self, timeout: float) -> bool:
        return self._attached.wait(timeout)

    @property
    def step_transport(self) -> str | None:
        """How steps go while attached: "socket" (the step socket) or
        "grpc" (the Step RPC); None while not attached."""
        s = self._sess
        if s is None:
            return None
        return "socket" if s.steps is not None else "grpc"

    @property
    def last_heard(self) -> float | None:
        """When the attached sidecar was last heard from (the client's
        clock); None while not attached."""
        s = self._sess
        return s.heard if s is not None else None

    @property
    def dead_after(self) -> float:
        """A sidecar silent this long is taken for gone (longer while it is
        runnable: starved of CPU, not frozen)."""
        return self._dead_after

    # -- calls -----------------------------------------------------------

    def step(self, req: pb.StepRequest) -> pb.StepResponse:
        """Sends one step; its registration is filled in here."""
        s = self._sess
        if s is None:
            raise SidecarUnavailable(self.last_error or "not attached")
        req.registration = s.registered.registration
        if s.steps is not None:
            return self._step_socket(s, req)
        try:
            return s.stub.Step(req, timeout=self._step_timeout)
        except grpc.RpcError as e:
            code: grpc.StatusCode = e.code()  # type: ignore[attr-defined]
            details: str = e.details() or ""  # type: ignore[attr-defined]
            raise self._step_error(s, code, details) from None

    def _step_socket(self, s: _Session, req: pb.StepRequest) -> pb.StepResponse:
        payload = req.SerializeToString()
        with self._step_mu:
            steps = s.steps
            if steps is None:  # dropped meanwhile
                raise SidecarUnavailable(self.last_error or "not attached")
            try:
                code, body = steps.call(payload, self._step_timeout, lambda waited: self._waits_on(s, waited))
            except (OSError, struct.error) as e:
                # A timeout leaves an answer in flight: the connection is
                # unusable, and so (as with the RPC) is the attachment.
                self._drop(s, f"step socket: {type(e).__name__}: {e}")
                raise SidecarUnavailable(f"step socket: {e}") from None
        if code == 0:
            return pb.StepResponse.FromString(body)
        raise self._step_error(s, _CODES.get(code, grpc.StatusCode.UNKNOWN), body.decode("utf-8", "replace"))

    def _starved(self, s: _Session) -> bool:
        """Whether the silent sidecar is runnable (a thread in state R):
        starved of CPU by a loaded host, not frozen (SIGSTOP: state T) or
        stuck. Logged once per attachment."""
        proc = s.steps.sidecar if s.steps is not None else None
        if proc is None or not proc.runnable():
            return False
        if not s.starved_logged:
            s.starved_logged = True
            log.info("kvp2p: the sidecar is silent but runnable (starved of CPU); waiting up to %.1fs",
                     self._dead_after * _STARVED_GRACE)
        return True

    def _waits_on(self, s: _Session, waited: float) -> bool:
        """Whether a step unanswered for `waited` seconds is still waited
        for: while s is attached and its sidecar heard from (the ticker
        drops a sidecar silent for dead_after), up to step_limit."""
        if self._sess is not s or self._closed.is_set() or waited >= self._step_limit:
            return False
        if not s.slow_step_logged:
            s.slow_step_logged = True
            log.info("kvp2p: a step unanswered after %.2fs; the sidecar is alive, waiting on", waited)
        return True

    def _step_error(self, s: _Session, code: grpc.StatusCode, details: str) -> Exception:
        """What a step answered with a status other than OK means, to raise."""
        if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED) or (
            code == grpc.StatusCode.FAILED_PRECONDITION and "registration" not in details
        ):
            return StepRefused(code, details)
        # Transport trouble, a stale registration or a stopped node: the
        # attachment is over; the supervisor reattaches.
        self._drop(s, f"step: {code.name}: {details}")
        return SidecarUnavailable(f"{code.name}: {details}")

    def watch_summaries(self) -> tuple[int, Any] | None:
        """Opens the WatchSummaries stream of the attached registration:
        (the registration, the call: iterate it for SummaryUpdates, cancel
        it to stop); None while not attached."""
        s = self._sess
        if s is None:
            return None
        reg = s.registered.registration
        return reg, s.stub.WatchSummaries(pb.WatchSummariesRequest(registration=reg))

    def grant(self, g: pb.ServeGrant) -> bool:
        """Answers an ask; False when no sidecar is attached to hear it."""
        s = self._sess
        if s is None:
            return False
        s.out.put(pb.EngineMessage(grant=g))
        return True

    # -- threads ---------------------------------------------------------

    def _drop(self, s: _Session, why: str) -> None:
        if self._sess is s:
            self.last_error = why
            s.call.cancel()

    def _supervise(self) -> None:
        while not self._closed.is_set():
            attached = False
            try:
                attached = self._attach_once()
            except Exception as e:  # noqa: BLE001 - any failure means: not attached, retry
                self.last_error = f"{type(e).__name__}: {e}"
                log.debug("kvp2p: attach failed: %s", self.last_error)
            if attached and not self._closed.is_set():
                log.warning("kvp2p: sidecar lost (%s); failing jobs in flight, reconnecting", self.last_error)
            if attached:
                try:
                    self._on_lost(self.last_error or "stream ended")
                except Exception:  # noqa: BLE001
                    log.exception("kvp2p: on_lost failed")
            self._closed.wait(self._retry_interval)

    def _attach_once(self) -> bool:
        """Attaches and serves the stream until it ends; True if it was attached."""
        opts = [("grpc.max_receive_message_length", _MAX_MSG), ("grpc.max_send_message_length", _MAX_MSG)]
        channel = grpc.insecure_channel(self._target, options=opts)
        out: queue.SimpleQueue[pb.EngineMessage | None] = queue.SimpleQueue()
        try:
            try:
                grpc.channel_ready_future(channel).result(timeout=1.0)
            except grpc.FutureTimeoutError:
                self.last_error = f"no sidecar answers at {self._target}"
                return False
            stub = pb_grpc.EngineStub(channel)
            out.put(pb.EngineMessage(register=self._register))

            def outgoing() -> Iterator[pb.EngineMessage]:
                while True:
                    m = out.get()
                    if m is None:
                        return
                    yield m

            call = stub.Attach(outgoing())
            first = next(call)
            if not first.HasField("registered"):
                raise SidecarUnavailable(f"first message is not Registered: {first.WhichOneof('msg')}")
            s = _Session(channel, stub, first.registered, out, call, self._dial_steps(first.registered), now=self._clock())
            with self._mu:
                if self._closed.is_set():
                    call.cancel()
                    if s.steps is not None:
                        s.steps.close()
                    return False
                self._sess = s
                self.sidecar = s.steps.sidecar if s.steps is not None else None
            self.last_error = ""
            log.info("kvp2p: attached to %s (registration %d, peer %s)", self._target,
                     first.registered.registration, first.registered.peer_id)
            if self._on_attached is not None:
                self._on_attached(first.registered)
            self._attached.set()
            try:
                self._read(s)
            finally:
                self._attached.clear()
                with self._mu:
                    self._sess = None
                with self._step_mu:
                    if s.steps is not None:
                        s.steps.close()
                        s.steps = None
            return True
        except grpc.RpcError as e:
            # Refused (a mismatch, another engine attached, the previous
            # engine still draining) or not there: retried after a pause.
            self.last_error = f"{e.code().name}: {e.details()}"  # type: ignore[attr-defined]
            if e.code() != grpc.StatusCode.UNAVAILABLE and self.last_error != self._refusal:  # type: ignore[attr-defined]
                log.warning("kvp2p: sidecar refused registration: %s", self.last_error)
            self._refusal = self.last_error
            return False
        finally:
            out.put(None)
            channel.close()

    def _dial_steps(self, registered: pb.Registered) -> StepSocket | None:
        """The step socket the sidecar named, or None: steps go over gRPC."""
        if not registered.step_socket:
            return None
        try:
            return StepSocket(registered.step_socket, self._step_timeout)
        except OSError as e:
            log.info("kvp2p: step socket %s: %s; stepping over gRPC", registered.step_socket, e)
            return None

    def _read(self, s: _Session) -> None:
        try:
            for m in s.call:
                s.heard = self._clock()
                kind = m.WhichOneof("msg")
                if kind == "ask":
                    self._on_ask(m.ask)
                elif kind == "release":
                    self._on_release(list(m.release.pin_ids))
        except grpc.RpcError as e:
            if not self.last_error:
                self.last_error = f"{e.code().name}: {e.details()}"  # type: ignore[attr-defined]
        else:
            if not self.last_error:
                self.last_error = "stream ended"

    @property
    def tick_period(self) -> float:
        """How often the ticker thread calls tick()."""
        return min(self._ping_interval, self._dead_after) / 4

    def _tick(self) -> None:
        self._last_tick = self._clock()
        while not self._closed.wait(self.tick_period):
            self.tick()

    def tick(self) -> None:
        """Checks the sidecar's silence and pings it when a ping is due."""
        now = self._clock()
        stalled = now - self._last_tick > 3 * self.tick_period
        self._last_tick = now
        s = self._sess
        if s is None:
            return
        if stalled:
            # This process did not run for a while (CPU starvation, a
            # long GIL hold, a pause): the sidecar's silence over that
            # time proves nothing, and its pings may be waiting unread.
            s.heard = max(s.heard, now - self.tick_period)
            return
        silent = now - s.heard
        if silent > self._dead_after and silent <= self._dead_after * _STARVED_GRACE and self._starved(s):
            return  # its pings wait for a CPU: slow, not hung (dropped at the grace's end)
        if silent > self._dead_after:
            self.silence_drop = (now, now - s.heard)
            self._drop(s, f"sidecar silent for {now - s.heard:.2f}s")
            return
        if now - s.pinged >= self._ping_interval:
            s.pinged = now
            s.seq += 1
            s.out.put(pb.EngineMessage(ping=pb.Ping(seq=s.seq)))
