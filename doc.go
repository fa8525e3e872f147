// Package kvp2p is a peer-to-peer KV-cache tier for fleets of LLM inference
// engines. A Node runs next to one engine rank: it serves the blocks its
// engine computed to other ranks, and pulls blocks its engine needs from
// them, falling back to local prefill when a peer fails.
//
// This package is the library a Go program embeds: Config, Node and
// Manager, and the request and result types. Those types are the node's
// own, named here (type aliases), so a value passes through unconverted.
// examples/embed is a program that embeds it. The engine talks to its node
// through Manager, whose calls mirror vLLM's secondary-tier API:
// NewRequest with the request's transfer parameters, Lookup (HIT, MISS or
// RETRY), EndStep (the step's lookups leave), SubmitLoad, SubmitStore of
// blocks put with PutBlock, PollFinished, RequestFinished. LookupWait and
// WaitFinished are Lookup and PollFinished for a caller that has nothing
// else to do: they park in the loop until there is an answer instead of
// polling. Every call is safe for concurrent use: it is forwarded to the
// node's loop, the one goroutine that owns the node's decision state and
// block store (internal/node over internal/loads).
//
// The loop performs what the decision core returns: it dials and accepts
// control and data connections, hands messages to one writer goroutine per
// connection, and drives the data path (internal/datapath), which streams
// block bytes straight between sockets and arena slots. No lock is held
// across I/O. Many nodes can run in one process: there is no package-level
// state. The package links neither gRPC nor Prometheus: the engine sidecar
// (gRPC) and the metrics endpoint are wired by the kvp2p command
// (docs/architecture.md has the package map).
package kvp2p
