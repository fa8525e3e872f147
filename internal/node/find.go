package node

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/store"
	"github.com/kvp2p/kvp2p/internal/summary"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// FindConfig turns on finding sources that no request names
// (docs/find.md): the node summarises what its tier holds, sends the
// summary to every peer it has a ready session with (same deployment: the
// handshake checked block size, fingerprint and hash seed), keeps theirs,
// and answers FindSource from them.
type FindConfig struct {
	Enabled bool `yaml:"enabled"`
	// Peers is the deployment's membership as the operator has it: peer
	// ids (host:port), comma-separated. The node keeps a session to each,
	// so that it has their summaries before a request needs them (its own
	// id may be in the list). Sessions opened by requests exchange
	// summaries too.
	Peers string `yaml:"peers"`
	// Interval is how often the node sends what changed (and proves its
	// summary fresh); default 1 s.
	Interval time.Duration `yaml:"interval"`
	// MaxAge is how old a peer's summary FindSource still uses; default
	// three intervals.
	MaxAge time.Duration `yaml:"max_age"`
}

func (c FindConfig) withDefaults() FindConfig {
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	if c.MaxAge <= 0 {
		c.MaxAge = 3 * c.Interval
	}
	return c
}

// finder is the node's summary state; the loop owns it.
type finder struct {
	cfg     FindConfig
	prod    *summary.Producer
	index   *summary.Index
	members []string              // FindConfig.Peers, split
	synced  map[loads.ConnID]bool // connections that got a snapshot: they get deltas
	next    time.Time             // the next flush
	// scan: the producer learns the tier from the node's own store (a node
	// without an engine); an engine sidecar reports its stores instead
	// (NoteStored).
	scan     bool
	watchers map[int]*watcher // WatchSummaries (find_watch.go)
	watchID  int
	applied  uint64 // summary parts applied
	refused  uint64 // parts refused (a gap, a format or size this side does not take)
}

func newFinder(cfg FindConfig, slots int, epoch uint64, scan bool) (*finder, error) {
	p, err := summary.NewProducer(slots, epoch)
	if err != nil {
		return nil, err
	}
	f := &finder{cfg: cfg.withDefaults(), prod: p, index: summary.NewIndex(0), synced: map[loads.ConnID]bool{}, scan: scan,
		watchers: map[int]*watcher{}}
	for _, m := range strings.Split(cfg.Peers, ",") {
		if m = strings.TrimSpace(m); m != "" {
			f.members = append(f.members, m)
		}
	}
	return f, nil
}

// findTick runs at every loop tick: at each interval it brings the
// producer up to date, sends every ready session its delta (or, the first
// time, a snapshot), forgets the summaries of peers without a session, and
// keeps sessions to the configured members.
func (n *Node) findTick(now time.Time) {
	f := n.find
	if f == nil || now.Before(f.next) {
		return
	}
	f.next = now.Add(f.cfg.Interval)
	if f.scan {
		n.scanStore()
	}
	delta := f.prod.Flush()
	var snap []wire.Summary
	ready := map[string]bool{}
	for id, c := range n.conns {
		peer, ok := n.tb.ReadyPeer(id)
		if !ok || c.closing() || c.w == nil {
			delete(f.synced, id)
			continue
		}
		ready[peer] = true
		parts := delta
		if !f.synced[id] {
			if snap == nil {
				snap = f.prod.Snapshot()
			}
			parts, f.synced[id] = snap, true
		}
		for i := range parts {
			c.w.send(&parts[i])
		}
	}
	for id := range f.synced {
		if _, ok := n.conns[id]; !ok {
			delete(f.synced, id)
		}
	}
	for _, p := range f.index.Peers() {
		if !ready[p] {
			f.index.Remove(p)
			f.tell(p, nil)
		}
	}
	for _, p := range f.members {
		if p != n.cfg.PeerID && !ready[p] {
			n.tb.Connect(now, p)
		}
	}
}

// scanStore brings the producer up to date with the node's own store:
// every Ready slot's key (a slot reused for another key replaces it).
func (n *Node) scanStore() {
	for s := range n.st.NumSlots() {
		slot := store.Slot(s)
		if k, ok := n.st.Key(slot); ok && n.st.State(slot) == store.StateReady && !n.st.Orphaned(slot) {
			_ = n.find.prod.Store(s, k)
		} else {
			n.find.prod.Remove(s)
		}
	}
}

// findReceive applies a peer's summary part; from a connection whose
// session is not ready (no handshake yet, or ended) it is dropped.
func (n *Node) findReceive(now time.Time, id loads.ConnID, m *wire.Summary) {
	f := n.find
	peer, ok := n.tb.ReadyPeer(id)
	if f == nil || !ok {
		return
	}
	if err := f.index.Apply(peer, m, now); err != nil {
		f.refused++
		n.log.Debug("peer summary refused", "peer", peer, "err", err)
		// A resync: the peer sends a snapshot when a session starts, so the
		// way to ask for one is a new session. Until then FindSource skips
		// it, and so must the watchers.
		f.tell(peer, nil)
		return
	}
	f.applied++
	f.tell(peer, m)
}

// NoteStored tells the node's summary that chunk now holds key (an engine
// sidecar's report of its engine's stores: a store into a chunk replaces
// what it held). It runs in the loop (Node.Do). No-op when finding is off.
func (n *Node) NoteStored(chunk int, key wire.Key) error {
	if n.find == nil {
		return nil
	}
	if n.find.scan {
		return fmt.Errorf("node: NoteStored on a node that summarises its own store")
	}
	return n.find.prod.Store(chunk, key)
}

// NoteRemoved tells the node's summary that chunk holds nothing now.
func (n *Node) NoteRemoved(chunk int) {
	if n.find != nil && !n.find.scan {
		n.find.prod.Remove(chunk)
	}
}

// Found is a source FindSource chose, or one of Prefixes' answers.
type Found struct {
	Peer string `json:"peer"`
	// Blocks: the prefix of the keys asked that it probably holds.
	Blocks int `json:"blocks"`
}

// FindSource returns the peer that probably holds the longest prefix of
// keys beyond the first from (those this side holds already), the least
// loaded among equals, never one whose session is not ready or that the
// failure policy holds anything against (health.Standing). ok is false
// when no such peer probably holds more. The caller then runs the
// ordinary symmetric lookup against it; its answer decides.
func (m *Manager) FindSource(keys []Key, from int) (Found, bool) {
	var c summary.Candidate
	var ok bool
	_ = m.do(func(now time.Time) { c, ok = m.n.findSource(now, keys, from) })
	return Found{Peer: c.Peer, Blocks: c.Blocks}, ok
}

func (n *Node) findSource(now time.Time, keys []Key, from int) (summary.Candidate, bool) {
	f := n.find
	if f == nil {
		return summary.Candidate{}, false
	}
	return f.index.Find(summary.Query{Keys: keys, From: from, Now: now, MaxAge: f.cfg.MaxAge,
		Eligible: func(p string) bool { return n.tb.Findable(now, p) },
		Load:     n.tb.Inflight})
}

// Prefixes returns, for this node and every usable peer, the prefix of
// keys it probably holds in its servable tier (what a router asks: GET
// /v1/prefix). This node comes first, under its own peer id; peers that
// hold none of keys are left out, and so is this node when it holds none.
func (m *Manager) Prefixes(keys []Key) []Found {
	var out []Found
	_ = m.do(func(now time.Time) {
		f := m.n.find
		if f == nil {
			return
		}
		self := 0
		for self < len(keys) && f.prod.Has(keys[self]) {
			self++
		}
		if self > 0 {
			out = append(out, Found{Peer: m.n.cfg.PeerID, Blocks: self})
		}
		peers := f.index.Prefixes(summary.Query{Keys: keys, Now: now, MaxAge: f.cfg.MaxAge,
			Eligible: func(p string) bool { return m.n.tb.Findable(now, p) }})
		slices.SortFunc(peers, func(a, b summary.Candidate) int { return b.Blocks - a.Blocks })
		for _, c := range peers {
			out = append(out, Found{Peer: c.Peer, Blocks: c.Blocks})
		}
	})
	return out
}
