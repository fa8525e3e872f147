package node

import (
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/ratelog"
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
	// DNS names more members by DNS, as a Kubernetes headless Service
	// does: comma-separated name:port entries; every A and AAAA record of
	// a name, with the entry's port, is a member's peer id (so members
	// must advertise their IP as peer_id, as deploy/kubernetes does).
	// Merged with Peers, and resolved again every DNSInterval.
	DNS string `yaml:"dns"`
	// DNSInterval is how often DNS entries are resolved; default 10 s.
	DNSInterval time.Duration `yaml:"dns_interval"`
	// DNSGrace is how long a member stays after the answers stopped
	// naming it (DNS flaps); default three DNS intervals.
	DNSGrace time.Duration `yaml:"dns_grace"`
	// Resolver answers the DNS entries; default net.DefaultResolver.
	Resolver Resolver `yaml:"-"`
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
	if c.DNSInterval <= 0 {
		c.DNSInterval = 10 * time.Second
	}
	if c.DNSGrace <= 0 {
		c.DNSGrace = 3 * c.DNSInterval
	}
	if c.Resolver == nil {
		c.Resolver = net.DefaultResolver
	}
	return c
}

func (c FindConfig) validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"interval", c.Interval}, {"max_age", c.MaxAge}, {"dns_interval", c.DNSInterval}, {"dns_grace", c.DNSGrace}} {
		if d.v < 0 {
			return fmt.Errorf("kvp2p: config: find.%s %v: must not be negative", d.name, d.v)
		}
	}
	_, err := parseDNSEntries(c.DNS)
	return err
}

// finder is the node's summary state; the loop owns it.
type finder struct {
	cfg     FindConfig
	prod    *summary.Producer
	index   *summary.Index
	members *members              // find.peers and find.dns (find_members.go)
	dns     []dnsEntry            // find.dns, for the resolver goroutine
	synced  map[loads.ConnID]bool // connections that got a snapshot: they get deltas
	next    time.Time             // the next flush
	// scan: the producer learns the tier from the node's own store (a node
	// without an engine); an engine sidecar reports its stores instead
	// (NoteStored).
	scan     bool
	watchers map[int]*watcher // WatchSummaries (find_watch.go)
	watchID  int
	// The cap on sessions follows the membership when max_peers is not
	// set: capBase plus the members (0: max_peers is the operator's).
	capBase   int
	capWarned bool      // the members do not fit a set max_peers, and the log said so
	stats     findStats // for metrics (find_stats.go)
	// reportLog logs what an engine reported that the summary could not
	// take: once a minute at most, with a count (the step repeats it).
	reportLog *slog.Logger
}

func newFinder(cfg Config, scan bool) (*finder, error) {
	p, err := summary.NewProducer(cfg.Slots, cfg.Incarnation)
	if err != nil {
		return nil, err
	}
	dns, err := parseDNSEntries(cfg.Find.DNS)
	if err != nil {
		return nil, err
	}
	fc := cfg.Find.withDefaults()
	f := &finder{cfg: fc, prod: p, index: summary.NewIndex(0), dns: dns, synced: map[loads.ConnID]bool{}, scan: scan,
		watchers: map[int]*watcher{}, stats: newFindStats(),
		reportLog: slog.New(ratelog.New(cfg.Log.Handler(), 1, time.Minute)).With("node", cfg.PeerID)}
	var static []string
	for _, m := range strings.Split(fc.Peers, ",") {
		if m = strings.TrimSpace(m); m != "" {
			static = append(static, m)
		}
	}
	f.members = newMembers(static, fc.DNSGrace)
	if cfg.Timers.MaxPeers == 0 {
		f.capBase = cfg.timers().MaxPeers
	}
	return f, nil
}

// findTick runs at every loop tick: at each interval it brings the
// producer up to date, sends every ready session its delta (or, the first
// time, a snapshot), forgets the summaries of peers without a session, and
// keeps sessions to the members.
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
	deltaBytes, snapBytes := f.stats.sizes(delta), 0
	var snap []wire.Summary
	ready := map[string]bool{}
	for id, c := range n.conns {
		peer, ok := n.tb.ReadyPeer(id)
		if !ok || c.closing() || c.w == nil {
			delete(f.synced, id)
			continue
		}
		ready[peer] = true
		parts, size := delta, deltaBytes
		if !f.synced[id] {
			if snap == nil {
				snap = f.prod.Snapshot()
				snapBytes = f.stats.sizes(snap)
			}
			parts, size, f.synced[id] = snap, snapBytes, true
		}
		for i := range parts {
			c.w.send(&parts[i])
		}
		f.stats.c.BytesOut += uint64(size)
	}
	f.stats.settle()
	for id := range f.synced {
		if _, ok := n.conns[id]; !ok {
			delete(f.synced, id)
		}
	}
	for _, p := range f.index.Peers() {
		if !ready[p] {
			f.index.Remove(p)
			f.stats.dropped(p)
			f.tell(p, nil)
		}
	}
	members := f.members.list(now)
	n.fitPeerCap(members)
	for _, p := range members {
		if p != n.cfg.PeerID && !ready[p] {
			n.tb.Connect(now, p)
		}
	}
}

// fitPeerCap keeps room for every member (not this node) beside the
// sessions requests open, when max_peers is not set: capBase is what it
// would be without find. A set max_peers is kept, with a warning when the
// members do not fit.
func (n *Node) fitPeerCap(members []string) {
	f := n.find
	others := len(members)
	if slices.Contains(members, n.cfg.PeerID) {
		others--
	}
	f.stats.members = others
	over := f.capBase == 0 && others >= n.tb.MaxPeers()
	if f.capBase > 0 {
		n.tb.SetMaxPeers(f.capBase + others)
	} else if over && !f.capWarned {
		n.log.Warn("find: more members than timers.max_peers allows sessions: members past it get none",
			"members", others, "max_peers", n.tb.MaxPeers())
	}
	f.capWarned = over // again if it comes back
}

// findResolved merges a DNS answer into the membership.
func (n *Node) findResolved(now time.Time, ev evResolved) {
	f := n.find
	if ev.err != nil {
		f.stats.c.DNSErrors++
		n.log.Warn("find: DNS lookup failed; members kept as they were", "entry", ev.entry, "err", ev.err)
		return
	}
	if over := f.members.resolved(now, ev.entry, ev.peers); over > 0 {
		n.log.Warn("find: DNS named more members than a node keeps; the rest are left out",
			"entry", ev.entry, "left_out", over, "max", maxDNSMembers)
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
	if f == nil {
		return
	}
	f.stats.c.BytesIn += uint64(f.stats.size(m))
	peer, ok := n.tb.ReadyPeer(id)
	if !ok {
		f.stats.c.Refused.Unready++
		return
	}
	if err := f.index.Apply(peer, m, now); err != nil {
		f.stats.refused(peer, err)
		n.log.Debug("peer summary refused", "peer", peer, "err", err)
		// A resync: the peer sends a snapshot when a session starts, so the
		// way to ask for one is a new session. Until then FindSource skips
		// it, and so must the watchers.
		f.tell(peer, nil)
		return
	}
	f.stats.applied(now, peer, m)
	f.tell(peer, m)
}

// NoteStored tells the node's summary that chunk now holds key (an engine
// sidecar's report of its engine's stores: a store into a chunk replaces
// what it held). It runs in the loop (Node.Do). No-op when finding is off.
// A report the summary cannot take is counted
// (kvp2p_summary_reports_refused_total) and logged at most once a minute;
// the error says why.
func (n *Node) NoteStored(chunk int, key wire.Key) error {
	f := n.find
	if f == nil {
		return nil
	}
	var err error
	if f.scan {
		err = fmt.Errorf("node: NoteStored on a node that summarises its own store")
	} else {
		err = f.prod.Store(chunk, key)
	}
	if err != nil {
		f.stats.c.ReportsRefused++
		f.reportLog.Error("stored blocks not summarised", "err", err, "refused_so_far", f.stats.c.ReportsRefused)
	}
	return err
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
