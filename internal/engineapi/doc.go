// Package engineapi is the engine-facing gRPC service (docs/design.md §6,
// proto/kvp2p/engine/v1/engine.proto): the transport between an inference
// engine and its kvp2p sidecar. It owns sockets, streams and the shape of
// messages; what the calls mean lives behind Backend, which the engine
// sidecar (internal/sidecar) implements.
//
// Contract:
//
//   - Attach: the first message must be a Register (version 1); the
//     Backend accepts or refuses it with a gRPC status. The stream then
//     carries the sidecar's asks and releases (Backend posts them to the
//     Outbox it was given; Post never blocks) and the engine's grants. One
//     sender goroutine per stream writes, and pings every PingInterval
//     while idle; the stream's own goroutine decides, so that a Send
//     blocked on flow control (an engine that stopped reading) cannot stop
//     it. The engine is detached when the stream ends, when it is silent
//     for EngineTimeout, when a Send has not finished after EngineTimeout,
//     or when its outbox overflows; time in which the sidecar itself did
//     not run (its loop idle for more than two ping intervals: SIGSTOP, a
//     paused VM) does not count as the engine's (pause.go). Detach is
//     called exactly once per accepted registration. On a Unix socket the
//     Outbox knows the engine's process (PeerPID), whose tree TreeState
//     reads: starved of CPU (runnable) or stopped.
//   - Step: checked for shape first (CheckStep: key lengths, counts against
//     Limits, duplicate job ids and chunks, matching lengths); a bad request
//     is answered INVALID_ARGUMENT or RESOURCE_EXHAUSTED without reaching
//     the Backend, which checks the rest (registration, chunk states) and
//     applies a step all or nothing. On the step socket a lookup batch's
//     keys_packed points into the connection's frame buffer (stepDecoder),
//     so the Backend keeps nothing of a request past Step's return.
//   - Unix sockets are created mode 0600 after removing a stale socket at
//     the same path (never another kind of file).
package engineapi
