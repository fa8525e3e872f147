package loads

import (
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// What the node reports. Each call runs in the table's owner goroutine.

// Accept registers an inbound control connection and returns its id. Over
// the peer cap (or while shutting down) the connection is refused: the node
// receives an ActClose for it at once.
func (t *Table) Accept(now time.Time) ConnID {
	c := t.newConn("", false, now)
	if t.shuttingDown || t.liveCount() > t.cfg.MaxPeers {
		if !t.shuttingDown {
			t.log.Warn("refusing inbound session: peer cap reached", "max_peers", t.cfg.MaxPeers)
		}
		t.reject(c)
		c.s.Goodbye(now, wire.GoodbyeTooManyPeers)
	} else {
		c.s.Start(now)
	}
	t.touch(c)
	t.settle(now)
	return c.id
}

// DialAnswered reports that an outbound dial's first connection was
// answered by the peer's kernel (its TCP connect completed; TLS, the data
// connection and the handshake may still be to come): the attempt did not
// go into a partition (health.Waits.Unanswered).
func (t *Table) DialAnswered(now time.Time, id ConnID) {
	if c := t.conns[id]; c != nil {
		c.answered = true
	}
}

// DataOwed reports whether connection id's session has loads waiting on
// its data path: the ones whose path the I/O layer measures (PathQuiet).
func (t *Table) DataOwed(now time.Time, id ConnID) bool {
	c := t.conns[id]
	if c == nil {
		return false
	}
	_, _, owed := c.s.DataSilence(now)
	return owed
}

// PathQuiet reports the longest silence connection id's data path can
// show while its peer is alive, as the kernel measures the path (TCP's
// retransmission timeout plus a round trip): the progress watchdog waits
// at least that long (session.SetPathQuiet).
func (t *Table) PathQuiet(now time.Time, id ConnID, d time.Duration) {
	c := t.conns[id]
	if c == nil || c.s.PathQuiet() == d {
		return
	}
	c.s.SetPathQuiet(d)
	t.touch(c) // its watchdog's deadline moves
	t.settle(now)
}

// Connected reports that an outbound dial succeeded.
func (t *Table) Connected(now time.Time, id ConnID) {
	c := t.conns[id]
	if c == nil {
		return
	}
	c.answered = true
	c.s.Start(now)
	t.touch(c)
	t.settle(now)
}

// ConnLost reports that a dial failed or a control connection ended without
// a Goodbye (EOF, RST, read error).
func (t *Table) ConnLost(now time.Time, id ConnID) {
	c := t.conns[id]
	if c == nil {
		return
	}
	c.s.ConnFailed(now)
	t.touch(c)
	t.settle(now)
}

// DialRefused reports that an outbound dial was refused: nothing listens
// at the peer's address, so its process is gone (ECONNREFUSED). It is
// ConnLost, but tells the policy that the peer is not merely slow or
// unreachable (a hello refused or a handshake that timed out means a live
// process, or a path that may heal).
func (t *Table) DialRefused(now time.Time, id ConnID) {
	c := t.conns[id]
	if c == nil {
		return
	}
	if c.s.Outbound() && c.s.Pending() {
		c.refused = true
	}
	c.s.ConnFailed(now)
	t.touch(c)
	t.settle(now)
}

// Receive dispatches a control message from connection id.
func (t *Table) Receive(now time.Time, id ConnID, m wire.Message) {
	c := t.conns[id]
	if c == nil {
		return
	}
	t.receive(now, c, m)
}

// ConnRef is a handle on one of a table's connections (Ref). An owner
// that dispatches many messages per connection keeps one beside the
// ConnID and calls ReceiveRef, which skips Receive's lookup by id (a
// map probe, and a cache miss or two per message in a large fleet). The
// zero ConnRef, and the handle of a connection that is gone, name no
// connection: ReceiveRef ignores them, as Receive ignores an unknown id.
type ConnRef struct{ c *conn }

// Ref returns the handle of connection id (the zero ConnRef if it is
// unknown). It is valid for this table only.
func (t *Table) Ref(id ConnID) ConnRef { return ConnRef{t.conns[id]} }

// ReceiveRef is Receive on the connection r names.
func (t *Table) ReceiveRef(now time.Time, r ConnRef, m wire.Message) {
	c := r.c
	if c == nil || c.st == connGone { // gone: out of t.conns (DataClosed)
		return
	}
	t.receive(now, c, m)
}

func (t *Table) receive(now time.Time, c *conn, m wire.Message) {
	known, wasReady := c.s.Identified(), c.s.Ready()
	if _, ok := m.(*wire.Hello); ok && !known && !c.s.Outbound() {
		// identified acks it unless it holds (hold.go) or refuses it: a
		// refused duplicate gets no HelloAck, so the dialer's attempt it
		// belongs to never looks ready (racedial.go).
		c.s.DeferAck()
	}
	ignored := c.s.PendingIgnored()
	c.s.Receive(now, m)
	if c.s.PendingIgnored() != ignored && t.cfg.Observer != nil {
		t.cfg.Observer.LookupPendingIgnored()
	}
	if !known && c.s.Identified() {
		t.identified(now, c)
	}
	if !wasReady && c.s.Ready() && c.s.Outbound() {
		t.attemptReady(now, c)
	}
	t.touch(c)
	t.settle(now)
}

// identified settles who owns a peer id once a Hello names it: a new
// incarnation replaces (and fails) the old session; a duplicate of a live
// session with the same incarnation is refused, except that of two
// simultaneous dials the one from the lower peer id wins on both sides.
func (t *Table) identified(now time.Time, c *conn) {
	// Receive deferred c's HelloAck if it would be held; a no-op otherwise,
	// and a guard against a newcomer left without an answer.
	defer func() {
		if c.holdFor == nil && !c.rejected {
			c.s.AckHello(now)
		}
	}()
	h := c.s.PeerHello()
	c.peer = c.s.Peer()
	if c.racing {
		return // a race is settled when a handshake finishes (attemptReady)
	}
	old := t.byPeer[c.peer]
	if old == nil || old == c || old.s.Ended() != health.CauseNone {
		t.byPeer[c.peer] = c
		return
	}
	oh := old.s.PeerHello()
	switch {
	case t.holdsFor(c, &h) == old:
		t.hold(now, c, old)
	case old.s.Identified() && oh.Incarnation != h.Incarnation:
		t.log.Warn("peer restarted: failing what the old incarnation owed", "peer", c.peer,
			"old_incarnation", oh.Incarnation, "new_incarnation", h.Incarnation, "outbound", c.s.Outbound())
		if old.s.Ready() {
			t.repl.Replaced++
		}
		old.endedBy = endedByRestart
		old.s.Close(now, health.CauseConnReset)
		t.touch(old)
		t.byPeer[c.peer] = c
	case !c.s.Outbound() && old.s.Outbound() && t.cfg.Session.LocalID > c.peer:
		// Simultaneous dial: the lower id's dial wins on both sides, whatever
		// state each side's handshake reached (a peer only dials us while
		// it knows of no session, so two live ones mean a race). Ours loses
		// and ends quietly: not a fault. Ours is not ready here: a ready one
		// was probed first (holdsFor).
		if old.s.Ready() {
			t.repl.Replaced++ // only without ProbeBeforeReplace
		}
		t.log.Info("simultaneous dial: the peer's dial replaces ours", "peer", c.peer)
		t.reject(old)
		old.s.Goodbye(now, wire.GoodbyeDuplicate)
		t.touch(old)
		t.byPeer[c.peer] = c
	default:
		t.reject(c)
		c.s.Goodbye(now, wire.GoodbyeDuplicate)
	}
}

// Starved: the node's loop could not run for d beyond what its clock
// already excluded (the process was starved of CPU), so no data-path
// answer could have been observed meanwhile. Every running data-path
// deadline (the sessions' progress-stall watchdogs, the policy's probes if
// it has any: health.Starver) moves d later, never earlier. Like
// DataProgress it decides nothing: a queued deadline left early costs a
// harmless visit.
func (t *Table) Starved(d time.Duration) {
	if d <= 0 {
		return
	}
	for _, c := range t.list {
		if c.st != connGone {
			c.s.Starved(d)
		}
	}
	if s, ok := t.policy.(health.Starver); ok {
		s.Starved(d)
	}
}

// DataProgress: bytes landed, or a Progress frame, for a consumer job. It
// and DataQueued usually decide nothing and only move the session's
// deadlines later (a queued deadline that is early costs a harmless
// visit): there is nothing to settle, and the hot path stays cheap. The
// exception is a load the session judges too slow to finish within its
// load timeout (session.ReasonSlow): it fails now, deliberately, and is
// settled as any other failed load; the session and the policy's view of
// the peer are untouched (slow is not dead).
func (t *Table) DataProgress(now time.Time, id ConnID, job, bytes uint64) {
	if c := t.conns[id]; c != nil {
		decided := c.s.DataProgress(now, job, bytes)
		if c.watched {
			t.seen(now, c)
		}
		if decided {
			t.touch(c)
			t.settle(now)
		}
	}
}

// DataQueued: the producer of a consumer job has its blocks and is
// sending other jobs first (Progress{Queued}).
func (t *Table) DataQueued(now time.Time, id ConnID, job uint64) {
	if c := t.conns[id]; c != nil {
		c.s.DataQueued(now, job)
		if c.watched {
			t.seen(now, c)
		}
	}
}

// DataCorrupt: a chunk of a consumer job failed its CRC.
func (t *Table) DataCorrupt(now time.Time, id ConnID, job uint64) {
	if c := t.conns[id]; c != nil {
		c.s.DataCorrupt(now, job)
		t.touch(c)
		t.settle(now)
	}
}

// DataEnd: the terminal data frame of a consumer job arrived.
func (t *Table) DataEnd(now time.Time, id ConnID, job uint64, ok bool, bytes uint64) {
	if c := t.conns[id]; c != nil {
		c.s.DataEnd(now, job, ok, bytes)
		if c.watched {
			t.seen(now, c)
		}
		t.touch(c)
		t.settle(now)
	}
}

// SendEnd: the writer finished a producer job (terminal frame written).
func (t *Table) SendEnd(now time.Time, id ConnID, job uint64, ok bool, bytes uint64) {
	if c := t.conns[id]; c != nil {
		c.s.SendEnd(now, job, ok, bytes)
		t.touch(c)
		t.settle(now)
	}
}

// DataClosed: after ActClose, no data-path goroutine of connection id can
// touch a slot any more. The session's held slots are freed and it is gone.
func (t *Table) DataClosed(now time.Time, id ConnID) {
	c := t.conns[id]
	if c == nil {
		return
	}
	if c.s.Ended() == health.CauseNone {
		// The node lost the data path on its own: the session is over.
		c.s.ConnFailed(now)
		t.touch(c)
		// Settled before the slots go: the reap counts the loads the end
		// failed (LoadsFailed), which the release then forgets.
		t.settle(now)
	}
	c.s.DataClosed(now)
	t.touch(c)
	t.settle(now)
	if c.st < connClosed {
		// Its data path ended while it lingered: the node still holds the
		// control connection.
		t.move(c, connClosed)
		t.actions = append(t.actions, Action{Kind: ActClose, Conn: c.id, Cause: c.s.Ended()})
	}
	delete(t.conns, id)
	t.leaveSource(c)
	if c.rep != reaped && !c.rejected {
		t.nLive--
	}
	t.move(c, connGone)
	t.markDirty(c) // out of the timer queues
	if t.byPeer[c.peer] == c {
		delete(t.byPeer, c.peer)
	}
	if len(t.racers[c.peer]) > 0 {
		t.liveRacers(c.peer) // drops it, and any other racer that ended
	}
}

// Tick runs every timer: sessions', idle eviction, unbound stores, shutdown.
func (t *Table) Tick(now time.Time) {
	if len(t.list) > 2*len(t.conns)+16 {
		t.compact()
	}
	t.rescheduleDirty()
	if t.cfg.CheckTimers {
		t.checkTimers()
	}
	t.visitDue(qTimer, now, func(c *conn) {
		c.s.Tick(now)
		t.touch(c)
	})
	t.policyTick = true
	// The sessions' timers and the policy's settle before the table's own:
	// a session the policy closes is not evicted as idle too.
	t.settle(now)
	t.evictIdle(now)
	t.reapUnbound(now)
	t.shutdownStep(now)
	t.settle(now)
}

// EvictAll says goodbye to every live session with reason, as an idle
// eviction (or an operator's drain) would: orderly ends, never evidence.
func (t *Table) EvictAll(now time.Time, reason wire.GoodbyeReason) {
	for _, c := range t.list {
		if c.st != connGone && c.s.Ended() == health.CauseNone {
			c.s.Goodbye(now, reason)
			t.touch(c)
		}
	}
	t.settle(now)
}
