package loads

import (
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
)

// ReadyPeer returns the peer id of connection id when its session is
// ready (handshake done, not ended): the only state in which the node
// takes a peer's summary (its Hello proved the same deployment: version,
// block size, fingerprint, hash seed).
func (t *Table) ReadyPeer(id ConnID) (string, bool) {
	c := t.conns[id]
	if c == nil || c.st == connGone || !c.s.Ready() || c.s.Ended() != health.CauseNone {
		return "", false
	}
	return c.peer, true
}

// Findable reports whether peer may be chosen as a source no request
// named: a ready session to it, and the policy holds nothing against it
// (health.Standing). Read-only: it decides nothing.
func (t *Table) Findable(now time.Time, peer string) bool {
	c := t.byPeer[peer]
	if c == nil || !c.s.Ready() || c.s.Ended() != health.CauseNone {
		return false
	}
	if s, ok := t.policy.(health.Standing); ok {
		return s.InGoodStanding(now, t.peerOf(c))
	}
	return true
}

// Inflight is how many loads this node runs from peer now: the load Find
// ranks equally good sources by.
func (t *Table) Inflight(peer string) int {
	c := t.byPeer[peer]
	if c == nil {
		return 0
	}
	n := 0
	for _, j := range t.jobs {
		if j.conn == c.id {
			n++
		}
	}
	return n
}
