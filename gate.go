package kvp2p

import (
	"net"
	"sync"
	"sync/atomic"
)

// connGate tracks the accepted connections that are not a session yet:
// those in their TLS handshake or waiting for their first frame, and a
// Hello or DataAttach waiting for its other half. It caps them globally
// and per source address, so that silent, half-open or Hello-only
// connections cost a bounded amount of memory and never take a slot of
// max_peers; and it closes every one at shutdown, so that Serve never
// waits for a handshake deadline.
//
// The accept goroutine enters connections, the connection's goroutine or
// the loop lets them out; the mutex is never held across I/O except
// Close, which does not block on a socket.
type connGate struct {
	maxTotal, maxPerSource int

	mu     sync.Mutex
	conns  map[net.Conn]string // -> source host
	perSrc map[string]int
	closed bool
}

func newConnGate(maxTotal, maxPerSource int) *connGate {
	return &connGate{maxTotal: maxTotal, maxPerSource: maxPerSource, conns: map[net.Conn]string{}, perSrc: map[string]int{}}
}

// gateRefusal says why enter refused a connection.
type gateRefusal uint8

const (
	gateOK gateRefusal = iota
	gateFull
	gateSourceFull
	gateClosed
)

// enter admits nc unless a cap is reached or the gate closed; the caller
// closes a refused connection.
func (g *connGate) enter(nc net.Conn) gateRefusal {
	src := sourceHost(nc)
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.closed:
		return gateClosed
	case len(g.conns) >= g.maxTotal:
		return gateFull
	case g.perSrc[src] >= g.maxPerSource:
		return gateSourceFull
	}
	g.conns[nc] = src
	g.perSrc[src]++
	return gateOK
}

// leave forgets nc (it became a session, or was closed); idempotent.
func (g *connGate) leave(nc net.Conn) {
	if nc == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	src, ok := g.conns[nc]
	if !ok {
		return
	}
	delete(g.conns, nc)
	if g.perSrc[src]--; g.perSrc[src] <= 0 {
		delete(g.perSrc, src)
	}
}

// len is the number of connections inside.
func (g *connGate) len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.conns)
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

// refusals count connections refused before they became sessions, by
// where; written by the accept and handshake goroutines.
type refusals struct {
	gate, tls, frame, identity atomic.Uint64
}

// Refusals are counts of connections refused before they became a
// session; for metrics and tests. Garbage on the port is logged at debug
// only, so these are how an operator sees it.
type Refusals struct {
	Gate     uint64 // over max_handshakes or max_handshakes_per_source
	TLS      uint64 // TLS handshake failed (no or untrusted certificate, allow_peers)
	Frame    uint64 // first frame missing, oversized, malformed or not a Hello or DataAttach
	Identity uint64 // claimed peer id not covered by the certificate or the source address
}

// Refused returns the node's refusal counts; safe from any goroutine.
func (n *Node) Refused() Refusals {
	r := &n.refused
	return Refusals{Gate: r.gate.Load(), TLS: r.tls.Load(), Frame: r.frame.Load(), Identity: r.identity.Load()}
}
