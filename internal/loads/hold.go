package loads

import (
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// Probe before replace. A Hello proves little: over plain TCP any process
// on a peer's host can claim the peer's id, and even a certificate only
// proves that the newcomer may speak for the peer, not that the live
// session with it is dead. Replacing a live, ready session on a Hello's
// word lets a neighbour hijack loads (a spoofed producer's bytes load as
// OK) or fail them (a spoofed consumer), as issue 25's attacks #1 and #5
// did. So, with Config.ProbeBeforeReplace set (the node sets it with and
// without TLS), an inbound newcomer that would replace a live, ready
// session is held: the table does not route to it and the policy does not
// hear of it, while the old session's data path is probed. An answer
// proves the old one alive and the newcomer is refused (Goodbye
// duplicate); no answer within ProbeBeforeReplace, or the old session's
// end, proves it dead and the newcomer replaces it. Two newcomers are
// held this way (holdsFor):
//
//   - one that claims the peer's new incarnation (the peer restarted, or
//     says so);
//   - one that claims the same incarnation and wins the simultaneous-dial
//     tie-break (the lower peer id's dial wins on both sides) against our
//     own dial, when that dial's session is already ready. In a real race
//     the peer answers the probe only if it kept our dial's session (it
//     acked our Hello), so refusing its dial is what it expects; a
//     neighbour claiming the peer's id and incarnation, learned from the
//     peer's own Hello, finds the real peer answering.
//
// A newcomer we dialed ourselves is never held: our dial reached the
// peer's own address. A session still in its handshake is not ready and
// is replaced at once, as before: nothing has been routed to it.
// Every replacement of a ready session is logged and counted
// (Replacements), and so is every refused newcomer.

// The held newcomer gets no HelloAck until it replaces the old session
// (Session.DeferAck): the peer behind it does not become ready, so nothing
// is sent through it while it waits, and a refused newcomer never had a
// session. A newcomer's handshake_timeout outlasts the wait with the
// presets (5 s and 30 s against heartbeat_timeout 2 s and 10 s).

// Replacements count what the table did when a Hello claimed a peer id
// that already had a session, for metrics.
type Replacements struct {
	// Replaced: a live, ready session was replaced by a newcomer, after
	// its probe went unanswered or it ended while the newcomer waited, or
	// at once by our own dial's session (the peer restarted).
	Replaced uint64
	// Refused: newcomers refused because the live session answered its
	// probe (or another newcomer was already waiting on it).
	Refused uint64
}

// Replacements returns the table's counts.
func (t *Table) Replacements() Replacements { return t.repl }

// holdsFor returns the live session an inbound newcomer whose Hello is h
// would be held on (see identified), or nil.
func (t *Table) holdsFor(c *conn, h *wire.Hello) *conn {
	if t.cfg.ProbeBeforeReplace <= 0 || c.s.Outbound() {
		return nil
	}
	old := t.byPeer[h.PeerID]
	if old == nil || old == c || old.s.Ended() != health.CauseNone || !old.s.Identified() || !old.s.Ready() {
		return nil
	}
	if old.s.PeerHello().Incarnation != h.Incarnation {
		return old // a restart, or a claim of one
	}
	if old.s.Outbound() && t.cfg.Session.LocalID > h.PeerID {
		return old // the tie-break would drop our ready dial
	}
	return nil
}

// holdSeqBit marks the table's own probe sequence numbers, apart from the
// policy's (which count up from 1).
const holdSeqBit = 1 << 63

// hold makes c wait on old's probe. A second newcomer for the same old
// session is refused at once: one check at a time.
func (t *Table) hold(now time.Time, c, old *conn) {
	if old.heldBy != nil {
		t.log.Warn("refusing a second newcomer for a peer already being checked", "peer", c.peer)
		t.repl.Refused++
		t.reject(c)
		c.s.Goodbye(now, wire.GoodbyeDuplicate)
		return
	}
	t.nextHold++
	c.holdFor, c.holdUntil, c.holdSeq = old, now.Add(t.cfg.ProbeBeforeReplace), holdSeqBit|t.nextHold
	old.heldBy = c
	t.log.Warn("a Hello claims a live, ready session's peer: probing the live session first",
		"peer", c.peer, "old_incarnation", old.s.PeerHello().Incarnation, "new_incarnation", c.s.PeerHello().Incarnation,
		"tie_break", old.s.PeerHello().Incarnation == c.s.PeerHello().Incarnation)
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
			t.log.Warn("live session did not answer its probe: replacing it with the newcomer", "peer", c.peer)
			if old.s.PeerHello().Incarnation != c.s.PeerHello().Incarnation {
				old.endedBy = endedByRestart
			}
			old.s.Close(now, health.CauseConnReset)
			t.touch(old)
		} else {
			t.log.Warn("live session ended while a newcomer waited: the newcomer replaces it", "peer", c.peer)
		}
		t.repl.Replaced++
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
	t.repl.Refused++
	t.reject(c)
	c.s.Goodbye(now, wire.GoodbyeDuplicate)
	t.touch(c)
}
