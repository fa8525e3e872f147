package health

import (
	"net"
	"strings"
)

// HostOf returns the host part of a "host:port" peer id, splitting at the
// last colon as vLLM does ("[::1]:7777" gives "::1"). An id without a port
// is its own host.
func HostOf(peerID string) string {
	if h, _, err := net.SplitHostPort(peerID); err == nil {
		return h
	}
	i := strings.LastIndexByte(peerID, ':')
	if i < 0 {
		return peerID
	}
	return strings.Trim(peerID[:i], "[]")
}

// Peer is what a policy knows of one session.
type Peer struct {
	ID       string // host:port
	Domain   string // failure domain; empty means "its own"
	Outbound bool   // we dialed it
}

// DomainOf returns the failure domain a peer belongs to: the one named, or
// the peer itself when none is. The default can therefore never group
// unrelated peers.
func DomainOf(p Peer) string {
	if p.Domain != "" {
		return p.Domain
	}
	return "peer:" + p.ID
}
