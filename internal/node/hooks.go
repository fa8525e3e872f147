package node

import (
	"log/slog"
	"time"

	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/store"
)

// EngineHooks are what an engine sidecar (internal/sidecar) plugs into a node:
// the hooks the loop calls. The node does not import the sidecar, so a
// program that embeds a node without one links no gRPC; the sidecar calls
// the node back only through the accessors below, in the loop (Do).
type EngineHooks interface {
	// Pending (loads.Resolver): a peer's lookup of a key the store does
	// not hold; the sidecar may ask its engine and let the lookup wait.
	loads.Resolver
	// Slot is the engine region's chunk i, or nil while no engine is
	// attached. Data-path goroutines call it, not the loop.
	Slot(i uint32) []byte
	// Tick runs at every loop tick, after the table's own.
	Tick(n *Node, now time.Time)
	// AfterTurn runs after every loop turn that performed the table's
	// effects; the loop performs the effects it causes.
	AfterTurn(n *Node, now time.Time)
	// Attached reports whether an engine is attached (for the snapshot).
	Attached() bool
	// Stop runs once the node stopped: the sidecar stops its engine API
	// and unmaps the region.
	Stop()
}

// The accessors below are for a sidecar's hooks and the calls it runs in
// the loop (Do): the loop's own state, which nothing else may touch.

// Table is the node's decision core.
func (n *Node) Table() *loads.Table { return n.tb }

// Store is the node's block store (an index of the engine's region under a
// sidecar).
func (n *Node) Store() *store.Store { return n.st }

// Log is the node's logger.
func (n *Node) Log() *slog.Logger { return n.log }

// Config is the node's config, defaults filled.
func (n *Node) Config() Config { return n.cfg }

// TakeResults returns the job results settled since the last call; a
// sidecar reports them to its engine instead of PollFinished.
func (n *Node) TakeResults() []JobResult { return n.takeResults() }

// Do runs f in the loop and waits, as every Manager call does; it fails
// with ErrClosed once the node stopped.
func (n *Node) Do(f func(now time.Time)) error { return n.Manager().do(f) }
