package loads

import (
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// Probe before replace. Over plain TCP a Hello proves nothing: any client
// can claim a peer's id with a new incarnation, and replacing the peer's
// live session on its word lets it hijack loads (a spoofed producer) or
// fail them (a spoofed consumer). So, with Config.ProbeBeforeReplace set,
// an inbound newcomer that claims a live, ready session's peer with a new
// incarnation is held: the table does not route to it and the policy does
// not hear of it, while the old session's data path is probed. An answer
// proves the old one alive and the newcomer is refused (Goodbye
// duplicate); no answer within ProbeBeforeReplace, or the old session's
// end, proves it dead and the newcomer replaces it. Under mutual TLS the
// certificate proves the identity and the newcomer replaces at once.

// The held newcomer gets no HelloAck until it replaces the old session
// (Session.DeferAck): the peer behind it does not become ready, so nothing
// is sent through it while it waits, and a refused newcomer never had a
// session. A newcomer's handshake_timeout outlasts the wait with the
// presets (5 s and 30 s against heartbeat_timeout 2 s and 10 s).

// holdsFor returns the live session an inbound newcomer whose Hello is h
// would be held on (see identified), or nil.
func (t *Table) holdsFor(c *conn, h *wire.Hello) *conn {
	if t.cfg.ProbeBeforeReplace <= 0 || c.s.Outbound() {
		return nil
	}
	old := t.byPeer[h.PeerID]
	if old == nil || old == c || old.s.Ended() != health.CauseNone || !old.s.Identified() ||
		!old.s.Ready() || old.s.PeerHello().Incarnation == h.Incarnation {
		return nil
	}
	return old
}

// holdSeqBit marks the table's own probe sequence numbers, apart from the
// policy's (which count up from 1).
const holdSeqBit = 1 << 63

// hold makes c wait on old's probe. A second newcomer for the same old
// session is refused at once: one check at a time.
func (t *Table) hold(now time.Time, c, old *conn) {
	if old.heldBy != nil {
		t.log.Warn("refusing a second newcomer for a peer already being checked", "peer", c.peer)
		t.reject(c)
		c.s.Goodbye(now, wire.GoodbyeDuplicate)
		return
	}
	t.nextHold++
	c.holdFor, c.holdUntil, c.holdSeq = old, now.Add(t.cfg.ProbeBeforeReplace), holdSeqBit|t.nextHold
	old.heldBy = c
	t.log.Warn("a Hello claims a live peer's new incarnation over plain TCP: probing the live session first",
		"peer", c.peer, "old_incarnation", old.s.PeerHello().Incarnation, "new_incarnation", c.s.PeerHello().Incarnation)
	old.s.Probe(now, c.holdSeq)
	t.touch(old)
	t.markDirty(c) // its hold deadline
}

// unhold ends c's wait.
func (t *Table) unhold(c *conn) {
	if c.holdFor != nil {
		c.holdFor.heldBy = nil
		c.holdFor = nil
	}
}

// checkHold (collect) replaces the old session once it is proven dead: it
// ended, or did not answer in time. A newcomer that ended itself just
// stops waiting.
func (t *Table) checkHold(now time.Time, c *conn) {
	old := c.holdFor
	switch {
	case old == nil:
		return
	case c.s.Ended() != health.CauseNone:
		t.unhold(c)
	case old.s.Ended() != health.CauseNone || !now.Before(c.holdUntil):
		t.unhold(c)
		if old.s.Ended() == health.CauseNone {
			t.log.Warn("live session did not answer its probe: the peer restarted", "peer", c.peer)
			old.endedBy = endedByRestart
			old.s.Close(now, health.CauseConnReset)
			t.touch(old)
		}
		if b := t.byPeer[c.peer]; b == nil || b == old || b.s.Ended() != health.CauseNone {
			t.byPeer[c.peer] = c
		}
		c.s.AckHello(now)
	}
}

// holdAnswered: the old session answered the probe a newcomer waits on, so
// it is alive and the newcomer is refused.
func (t *Table) holdAnswered(now time.Time, old *conn, seq uint64) {
	c := old.heldBy
	if c == nil || c.holdSeq != seq {
		return
	}
	t.unhold(c)
	t.log.Warn("refusing a newcomer: the live session answered its probe", "peer", c.peer)
	t.reject(c)
	c.s.Goodbye(now, wire.GoodbyeDuplicate)
	t.touch(c)
}
