package sim

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/store"
)

// NodeOpts describes a node to build.
type NodeOpts struct {
	Policy      string        // per-peer, host-group (domain later)
	Timers      *loads.Timers // nil: the policy's preset
	Domain      string
	BlockBytes  int // default 4096
	Slots       int // default 256
	Incarnation uint64
	Fingerprint string
	HashSeed    string
	Log         *slog.Logger
	// ProbeBeforeReplace: loads.Config's (plain TCP's check of a new
	// incarnation); zero, as under TLS, replaces at once.
	ProbeBeforeReplace time.Duration
	// Observer: loads.Config's (tests that compare what it heard).
	Observer loads.Observer
	// Resolver: loads.Config's (tests of a producer whose engine is
	// asked for blocks its store does not hold).
	Resolver loads.Resolver
}

// NewNode builds a node with its own store and table and adds it to n.
func (n *Net) NewNode(id string, o NodeOpts) (*Node, error) {
	if o.BlockBytes == 0 {
		o.BlockBytes = 4096
	}
	if o.Slots == 0 {
		o.Slots = 256
	}
	if o.Incarnation == 0 {
		o.Incarnation = 1
	}
	if o.Policy == "" {
		o.Policy = health.PerPeer
	}
	t := loads.PresetTimers(o.Policy)
	if o.Timers != nil {
		t = *o.Timers
	}
	pol, err := health.New(o.Policy, loads.PolicyOptions(t))
	if err != nil {
		return nil, err
	}
	st, err := store.New(o.Slots, o.BlockBytes)
	if err != nil {
		return nil, err
	}
	cfg := loads.BuildConfig(loads.Identity{
		LocalID: id, Incarnation: o.Incarnation, Domain: o.Domain, BlockBytes: uint32(o.BlockBytes),
		Fingerprint: o.Fingerprint, HashSeed: o.HashSeed,
	}, t, pol)
	cfg.Log = o.Log
	cfg.CheckTimers = n.CheckTimers
	cfg.ProbeBeforeReplace = o.ProbeBeforeReplace
	cfg.Observer = o.Observer
	cfg.Resolver = o.Resolver
	tb, err := loads.New(cfg, st)
	if err != nil {
		return nil, fmt.Errorf("sim: node %s: %w", id, err)
	}
	if n.CheckTimers {
		n.checked = append(n.checked, tb)
	}
	nd := n.Add(id, tb, st)
	nd.opts = o
	return nd, nil
}

// Replace swaps a node for a fresh one with the same id (a restart): the
// old one's connections stay as they are (half-open if it was silent) and
// whatever reaches it from now on is dropped.
func (n *Net) Replace(nd *Node, o NodeOpts) (*Node, error) {
	for i, x := range n.order {
		if x == nd {
			n.order = append(n.order[:i], n.order[i+1:]...)
			break
		}
	}
	nd.gone = true
	delete(n.nodes, nd.ID)
	nn, err := n.NewNode(nd.ID, o)
	if err == nil {
		nn.Rank = nd.Rank
	}
	return nn, err
}

// TimerError is the first timer-queue inconsistency a table built under
// CheckTimers found, or nil.
func (n *Net) TimerError() error {
	for _, tb := range n.checked {
		if err := tb.TimerError(); err != nil {
			return err
		}
	}
	return nil
}
