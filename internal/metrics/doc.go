// Package metrics is what a node counts for its operator, in plain types
// (no Prometheus here: its face is internal/metrics/prom).
//
// The node's loop owns the counts: it bumps plain fields of a Counters and
// observes Hists as it performs the decisions its cores return, with no
// lock and no Prometheus type on that path. On demand it copies them, with
// a view of its sessions, domains and loads, into a Snapshot. A scrape
// asks the loop for a Snapshot and turns it into constant metrics
// (prom.Collector), so a registry per node is all the state there is: many
// nodes run in one process, each with its own registry.
//
// Defs lists every metric (name, type, labels, meaning, vLLM's name); the
// table in docs/metrics.md is generated from it, and a test keeps the two
// equal.
package metrics
