// Package workload is the request lifecycle of a docs/design.md §7 scenario:
// the "engine" of every consumer rank (Poisson arrivals, lookups, loads,
// byte-for-byte checks) and the prefill side of every source rank (PD
// stores). The simulator (internal/sim, virtual time over loads.Table),
// the demo (internal/demo, wall time over node.Manager on real sockets)
// and the fault lab (internal/lab, real processes in network namespaces,
// over the engine API) all drive it, so all make the same requests in the
// same order.
//
// The package is sans-I/O: it reads no clock, starts no goroutine and
// never blocks. Time is an argument (the elapsed time since the run's
// time 0), and the nodes are reached through the small Node and Fleet
// interfaces, which each driver implements with a thin adapter.
//
// # The caller's duties
//
// An Engine is not safe for concurrent use: one goroutine calls it.
//
//  1. Build it with New, with the consumer and source ranks in a fixed
//     order: consumer i draws its arrivals, sources and modes from
//     PCG(Config.Seed, i), and the keys of its blocks from Key.
//  2. Call Step(now) at every engine step, with now not decreasing. A
//     step runs the due PD prefills, then for each consumer whose node is
//     Up, in order: its arrivals up to now, the load results delivered
//     to it, and the lookups of its pending requests.
//  3. Hand every job result of a consumer's node to Deliver, either as
//     the node publishes it (from within Node.Flush, even while a Step is
//     running) or from Node.Poll, which Step calls before acting on the
//     results. A load reported OK is checked with Node.Verify at once.
//  4. At the end, call EndRun (what is unresolved stays Stuck and is
//     finished on its consumer's current node), then Requests for the
//     records.
//
// For given inputs the engine's node calls, Flush included, come in one
// fixed order, so a deterministic driver (the simulator) stays
// deterministic.
package workload
