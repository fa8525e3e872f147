// Package sidecar is a node's engine side: it serves the engine API
// (internal/engineapi, gRPC over a Unix socket, plus the step socket) to
// one vLLM engine rank, and makes the engine's shared-memory region the
// node's slots.
//
// Contract: the sidecar plugs into a node through node.EngineHooks, the hooks
// the node's loop calls (Pending, Tick, AfterTurn, Slot, Attached, Stop);
// the node never imports this package. Every engine call runs in the
// node's loop (node.Node.Do), so the engine state here is the loop's and
// needs no lock; only the region pointer is read by data-path goroutines
// (Slot). Whoever wires a sidecar imports it: `kvp2p serve` with an engine
// socket, and the tests; a program that embeds the library without one
// links no gRPC.
package sidecar
