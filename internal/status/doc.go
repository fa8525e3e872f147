// Package status serves a node's operator surface over HTTP and reads it
// back: /metrics (Prometheus), /status.json (the snapshot), / (a
// self-contained HTML page that refreshes itself), /healthz (the process
// is alive) and /readyz (listening, and the engine registered when one is
// expected). It also renders a snapshot as text for `kvp2p status`.
//
// Every handler works on a snapshot the node's loop copied out
// (metrics.Source): a handler never reads node state, and nothing is
// locked while it encodes or writes.
package status
