// Package node is a kvp2p node's loop and everything it owns: the
// listener and dialer, control connections (ctlconn.go), the handshake
// gate, the data path's connections, the loop's clock, the observer that
// counts for metrics, and the Manager calls that run in the loop.
//
// Contract: one goroutine, Node.loop, owns the node's state and is the
// only caller of the decision core (internal/loads); every other
// goroutine (accept, dial, readers, writers, the data path, find's DNS
// lookups) talks to it through events and calls, and no lock is held
// across I/O. The core
// gets the loop's time as a parameter; nothing below the loop reads the
// wall clock. The public library (package kvp2p) is a thin handle over
// this package; the kvp2p command and the harnesses (demo, bench) use it
// directly for what the library does not export.
package node
