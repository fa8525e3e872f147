// Package health decides what a session's end means for the rest of the
// fleet: the cause vocabulary, failure domains, and the failure policies
// (domain, the default; per-peer; host-group) behind one seam.
//
// Contract: the package is pure. It does no I/O and never reads the wall
// clock; every method that depends on time takes `now`. A Policy is owned by
// one goroutine (the node's loop) and is not safe for concurrent use.
package health
