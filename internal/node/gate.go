package node

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvp2p/kvp2p/internal/metrics"
)

// connGate tracks the accepted connections that are not a session yet:
// those in their TLS handshake or waiting for their first frame, and a
// Hello or DataAttach waiting for its other half. It caps them, so that
// silent, half-open or Hello-only connections cost a bounded amount of
// memory and never take a slot of max_peers; and it closes every one at
// shutdown, so that Serve never waits for a handshake deadline.
//
// The caps keep room for the good (docs/security-resources.md):
//
//   - per source address, maxPerSource (32), and per prefix (/24, /64:
//     neighbours on one subnet, or a host's loopback addresses),
//     maxTotal/2, so that one host or subnet holds at most half;
//   - a reserved quarter of maxTotal that only sources which completed a
//     handshake lately (recentFor, at most recentMax remembered, oldest
//     forgotten first) may take;
//   - at every cap, the newcomer evicts a connection of that cap's scope
//     rather than being refused (only an empty scope refuses): the oldest
//     connection of the source that holds the most in the scope. A
//     genuine peer holds one or two connections for a round trip or two;
//     a flood holds many, and reopens what is evicted. Evicting from the
//     largest source makes a reconnect storm evict its own connections
//     however fast it reopens them (the oldest alone was not enough: 160
//     connections from five addresses reopened at once pushed out a
//     genuine handshake within its round trip, and a legitimate peer
//     completed 0 to 6 of 10). Within one source, the oldest goes: a
//     victim's newer connections outlast a flood's older ones, and its
//     data connection never evicts its own control connection, silent
//     for the moment its first frame takes.
//   - a connection from a source that completed a handshake lately is
//     evicted only by a newcomer of its own source or of another such
//     source: a peer that got in lately gets in again however fast
//     sources that never complete a handshake reconnect;
//   - a source that completed no handshake lately enters at most
//     maxPerSource times a second, after a burst of twice that (rateOK):
//     the per-source cap holds for reconnect storms, not only for held
//     connections.
//
// A connection evicted after its first frame is a half handshake the
// loop holds: it drops it at its next tick (halves), or when the first
// frame reaches it (evicted).
//
// "Completed a handshake" is a Hello paired with its DataAttach (the loop's
// admit), before the table has looked at the Hello: a source can earn the
// reserve with a Hello the table then refuses. The reserve is against
// floods from sources that never pair their halves; a plain-TCP peer that
// completes handshakes is an identity question (docs/security.md).
//
// The accept goroutine enters connections, the connection's goroutine or
// the loop lets them out; the mutex is never held across I/O except
// Close, which does not block on a socket.
type connGate struct {
	maxTotal, maxPerSource, maxPerPrefix, reserved int

	mu       sync.Mutex
	conns    map[net.Conn]*gateEntry
	perSrc   map[string]int
	perPfx   map[string]int
	nRecent  int // entries from recent sources
	seq      uint64
	recent   map[string]time.Time // source -> last handshake completed
	closed   bool
	nEvicted uint64
	// rate: each source's bucket of entries (rateFor), for sources that
	// completed no handshake lately; at most recentMax remembered.
	rate map[string]*bucket
	// gone: connections evicted after their first frame, which the loop
	// holds or is about to (halves); they go at their leave.
	gone map[net.Conn]bool
}

type gateEntry struct {
	src, pfx string
	seq      uint64 // order of arrival: the oldest has the least
	spoke    bool   // its first frame was read
	recent   bool   // its source had completed a handshake when it came
}

// bucket is a token bucket of a source's entries.
type bucket struct {
	tokens float64
	at     time.Time
}

// How long, and how many, sources that completed a handshake are
// remembered for the reserved share.
const (
	recentFor = 10 * time.Minute
	recentMax = 4096
)

func newConnGate(maxTotal, maxPerSource int) *connGate {
	return &connGate{
		maxTotal: maxTotal, maxPerSource: maxPerSource,
		maxPerPrefix: max(1, maxTotal/2), reserved: maxTotal / 4,
		conns: map[net.Conn]*gateEntry{}, perSrc: map[string]int{}, perPfx: map[string]int{},
		recent: map[string]time.Time{}, gone: map[net.Conn]bool{}, rate: map[string]*bucket{},
	}
}

// rateOK takes one of src's entry tokens: a source that completed no
// handshake lately enters at most maxPerSource times a second after a
// burst of twice that. A reconnect storm is then refused at the door,
// before the goroutine and the eviction an entry costs, and its evictions
// of its own connections are bounded; a genuine peer's first handshake
// takes two entries. When recentMax sources are remembered, the idle
// (full) ones are forgotten; if none is, a new source is not limited.
func (g *connGate) rateOK(src string, now time.Time) bool {
	rate, burst := float64(g.maxPerSource), 2*float64(g.maxPerSource)
	b := g.rate[src]
	if b == nil {
		if len(g.rate) >= recentMax {
			for s, o := range g.rate {
				if o.tokens+now.Sub(o.at).Seconds()*rate >= burst {
					delete(g.rate, s)
				}
			}
			if len(g.rate) >= recentMax {
				return true
			}
		}
		b = &bucket{tokens: burst, at: now}
		g.rate[src] = b
	}
	if dt := now.Sub(b.at).Seconds(); dt > 0 {
		b.tokens = min(burst, b.tokens+dt*rate)
	}
	b.at = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// gateRefusal says why enter refused a connection.
type gateRefusal uint8

const (
	gateOK gateRefusal = iota
	gateFull
	gateSourceFull
	gateClosed
)

// enter admits nc unless a cap is reached with nothing to evict in its
// scope, or the gate closed; the caller closes a refused connection.
// Evicted connections are closed here.
func (g *connGate) enter(nc net.Conn, now time.Time) gateRefusal {
	src := sourceHost(nc)
	pfx := sourcePrefix(src)
	var out []net.Conn
	defer func() {
		for _, c := range out {
			c.Close() // does not block; the connection's goroutine then leaves
		}
	}()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return gateClosed
	}
	recent := g.isRecent(src, now)
	if !recent && !g.rateOK(src, now) {
		return gateSourceFull
	}
	evict := func(full bool, in func(*gateEntry) bool) bool {
		if !full {
			return true
		}
		old := g.victim(func(e *gateEntry) bool {
			return in(e) && (!e.recent || recent || e.src == src)
		})
		if old == nil {
			return false
		}
		if g.conns[old].spoke {
			g.gone[old] = true
		}
		out = append(out, old)
		g.remove(old)
		g.nEvicted++
		return true
	}
	switch {
	case !evict(g.perSrc[src] >= g.maxPerSource, func(e *gateEntry) bool { return e.src == src }):
		return gateSourceFull
	case !evict(g.perPfx[pfx] >= g.maxPerPrefix, func(e *gateEntry) bool { return e.pfx == pfx }):
		return gateSourceFull
	case !recent && !evict(len(g.conns)-g.nRecent >= g.maxTotal-g.reserved, func(e *gateEntry) bool { return !e.recent }):
		return gateFull
	case !evict(len(g.conns) >= g.maxTotal, func(*gateEntry) bool { return true }):
		return gateFull
	}
	g.seq++
	g.conns[nc] = &gateEntry{src: src, pfx: pfx, seq: g.seq, recent: recent}
	g.perSrc[src]++
	g.perPfx[pfx]++
	if recent {
		g.nRecent++
	}
	return gateOK
}

// victim is the connection in scope to evict: the oldest of the source
// holding the most connections in scope (of two as large, the one whose
// oldest came first); nil if the scope is empty. Two scans: the gate
// holds at most maxTotal.
func (g *connGate) victim(in func(*gateEntry) bool) net.Conn {
	type held struct {
		n   int
		old net.Conn
		seq uint64
	}
	by := map[string]*held{}
	var top *held
	for nc, e := range g.conns {
		if !in(e) {
			continue
		}
		h := by[e.src]
		if h == nil {
			h = &held{}
			by[e.src] = h
		}
		h.n++
		if h.old == nil || e.seq < h.seq {
			h.old, h.seq = nc, e.seq
		}
	}
	for _, h := range by {
		if top == nil || h.n > top.n || (h.n == top.n && h.seq < top.seq) {
			top = h
		}
	}
	if top == nil {
		return nil
	}
	return top.old
}

// halves returns the connections evicted after their first frame that
// have not left yet: the loop drops those it holds from its maps of half
// handshakes (dropConn, which makes them leave); the others are on their
// way to it (evicted says so when they arrive) or their goroutine is
// closing them.
func (g *connGate) halves() []net.Conn {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.gone) == 0 {
		return nil
	}
	h := make([]net.Conn, 0, len(g.gone))
	for nc := range g.gone {
		h = append(h, nc)
	}
	return h
}

// evicted reports whether nc was evicted after its first frame (and has
// not left yet): the loop drops it rather than hold it.
func (g *connGate) evicted(nc net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gone[nc]
}

// spoke marks nc's first frame read: the loop may hold it from then on,
// and must hear of its eviction (halves, evicted).
func (g *connGate) spoke(nc net.Conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e := g.conns[nc]; e != nil {
		e.spoke = true
	}
}

// handshook remembers nc's source as one that completed a handshake at
// now, for the reserved share; at most recentMax sources, the least
// recent forgotten first.
func (g *connGate) handshook(nc net.Conn, now time.Time) {
	src := sourceHost(nc)
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.recent[src]; !ok && len(g.recent) >= recentMax {
		g.forgetRecent(now)
	}
	g.recent[src] = now
}

// forgetRecent drops the sources older than recentFor, and if none is,
// the least recent one.
func (g *connGate) forgetRecent(now time.Time) {
	var oldest string
	var at time.Time
	for s, t := range g.recent {
		if now.Sub(t) >= recentFor {
			delete(g.recent, s)
			continue
		}
		if oldest == "" || t.Before(at) {
			oldest, at = s, t
		}
	}
	if len(g.recent) >= recentMax {
		delete(g.recent, oldest)
	}
}

func (g *connGate) isRecent(src string, now time.Time) bool {
	t, ok := g.recent[src]
	return ok && now.Sub(t) < recentFor
}

// leave forgets nc (it became a session, or was closed); idempotent.
func (g *connGate) leave(nc net.Conn) {
	if nc == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.remove(nc)
	delete(g.gone, nc)
}

func (g *connGate) remove(nc net.Conn) {
	e, ok := g.conns[nc]
	if !ok {
		return
	}
	delete(g.conns, nc)
	if g.perSrc[e.src]--; g.perSrc[e.src] <= 0 {
		delete(g.perSrc, e.src)
	}
	if g.perPfx[e.pfx]--; g.perPfx[e.pfx] <= 0 {
		delete(g.perPfx, e.pfx)
	}
	if e.recent {
		g.nRecent--
	}
}

// len is the number of connections inside.
func (g *connGate) len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.conns)
}

// takeEvicted returns the evictions since the last call.
func (g *connGate) takeEvicted() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.nEvicted
	g.nEvicted = 0
	return n
}

// closeAll closes every connection inside and refuses new ones.
func (g *connGate) closeAll() {
	g.mu.Lock()
	g.closed = true
	conns := make([]net.Conn, 0, len(g.conns))
	for nc := range g.conns {
		conns = append(conns, nc)
	}
	clear(g.conns)
	clear(g.perSrc)
	clear(g.perPfx)
	clear(g.gone)
	clear(g.rate)
	g.nRecent = 0
	g.mu.Unlock()
	for _, nc := range conns {
		nc.Close()
	}
}

func sourceHost(nc net.Conn) string {
	a := nc.RemoteAddr()
	if a == nil {
		return ""
	}
	h, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return h
}

// sourcePrefix is the /24 of an IPv4 source, the /64 of an IPv6 one, the
// source itself if it is not an address.
func sourcePrefix(src string) string {
	ip, err := netip.ParseAddr(src)
	if err != nil {
		return src
	}
	bits := 64
	if ip.Unmap().Is4() {
		ip, bits = ip.Unmap(), 24
	}
	p, err := ip.Prefix(bits)
	if err != nil {
		return src
	}
	return p.String()
}

// refusals count connections refused before they became a session, by
// where; written by the accept and handshake goroutines, read into the
// status snapshot (kvp2p_connections_refused_total).
type refusals struct {
	gate, tls, frame, identity atomic.Uint64
}

// connsRefused returns the node's refusal counts; safe from any goroutine.
func (n *Node) connsRefused() metrics.Refusals {
	r := &n.refused
	return metrics.Refusals{Gate: r.gate.Load(), TLS: r.tls.Load(), Frame: r.frame.Load(), Identity: r.identity.Load()}
}
