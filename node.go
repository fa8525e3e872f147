package kvp2p

import (
	"context"
	"fmt"
	"net"

	"github.com/kvp2p/kvp2p/internal/metrics"
	"github.com/kvp2p/kvp2p/internal/node"
)

// ErrClosed is returned by Manager calls after the node stopped.
var ErrClosed = node.ErrClosed

// Node is one kvp2p instance: a handle on the node's loop
// (internal/node), which owns all of its state. See the package doc.
type Node struct{ n *node.Node }

// NewNode validates cfg and builds a node with its own store; Serve runs
// it.
func NewNode(cfg Config) (*Node, error) {
	n, err := node.New(cfg)
	if err != nil {
		return nil, err
	}
	return &Node{n: n}, nil
}

// PeerID is the node's advertised id.
func (n *Node) PeerID() string { return n.n.PeerID() }

// Manager is the engine-facing API of this node.
func (n *Node) Manager() *Manager { return &Manager{m: n.n.Manager()} }

// Serve runs the node on ln until Shutdown or Close, and returns nil then;
// it returns an error if the listener fails for good (the node stopped).
func (n *Node) Serve(ln net.Listener) error { return n.n.Serve(ln) }

// Shutdown drains: transfers in flight get the shutdown drain to finish,
// every peer gets a Goodbye, then the node stops. If ctx ends first the
// node is closed at once.
func (n *Node) Shutdown(ctx context.Context) error { return n.n.Shutdown(ctx) }

// Close stops the node now: every connection is closed.
func (n *Node) Close() error { return n.n.Close() }

// ReloadTLS reads the TLS files again (SIGHUP); a no-op without TLS. New
// connections use the new certificate; established ones keep theirs.
func (n *Node) ReloadTLS() error { return n.n.ReloadTLS() }

// Snapshot is a node's state and counts at one instant: what the status
// page, `kvp2p status` and a metrics scrape show. Like the package's other
// types it is the one definition (internal/metrics', a plain data tree with
// no Prometheus), named here.
type Snapshot = metrics.Snapshot

// Status returns a snapshot of the node, taken in its loop: the caller
// never reads the node's state itself, and nothing is locked while the
// snapshot is encoded or sent. It fails with ErrClosed once the node
// stopped, or with ctx's error if the loop does not get to it in time (the
// node has not started serving).
func (n *Node) Status(ctx context.Context) (*Snapshot, error) { return n.n.Status(ctx) }

func (n *Node) String() string { return fmt.Sprintf("kvp2p.Node(%s)", n.n.PeerID()) }
