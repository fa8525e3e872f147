package loads

import (
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/wire"
)

func (t *Table) peerOf(c *conn) health.Peer {
	d := c.domain
	if d == "" {
		d = c.s.PeerHello().Domain
	}
	return health.Peer{ID: c.peer, Domain: d, Outbound: c.s.Outbound()}
}

// reapOne handles a session's end (settle calls it, once per end, in
// order): the ended session's request ids go into the failed set so their
// lookups are MISS, its producer bindings are purged, and the policy hears
// of it and names the siblings that close with it. A sibling is closed
// here, as collateral: its own end is not fed back to the policy.
func (t *Table) reapOne(now time.Time, c *conn) {
	defer t.promoteRacer(now, c) // after the policy's siblings: it is no sibling
	wasUp := c.rep == reportedUp
	t.report(c, reaped)
	cause := c.s.Ended()
	n := t.failLoadsOf(c)
	t.unbindEnded(c)
	if c.rejected {
		return // never a session: the policy does not see it
	}
	t.log.Warn("peer down", "peer", c.peer, "cause", cause.String(), "loads_failed", n, "policy", t.policy.Name())
	end := health.End{Cause: cause, Restart: c.endedBy == endedByRestart, LoadsFailed: n, ByPolicy: c.endedBy == endedByPolicy, WasUp: wasUp,
		Refused: c.refused && !wasUp}
	for _, p := range t.policy.SessionEnded(now, t.peerOf(c), end) {
		o := t.byPeer[p.ID]
		if o == nil || o.rep == reaped || o.s.Ended() != health.CauseNone {
			continue
		}
		t.log.Warn("closing sibling with its dead peer", "peer", o.peer, "dead_peer", c.peer, "policy", t.policy.Name())
		t.report(o, reaped)
		o.s.Close(now, cause)
		t.touch(o)
		t.unbindEnded(o)
		t.endRace(now, o.peer) // its attempts racing it go with it
	}
	t.askPolicy = true
}

// unbindEnded marks an ended session's requests failed and purges its
// producer bindings.
func (t *Table) unbindEnded(c *conn) {
	for _, id := range c.s.FailedRequests() {
		t.markFailed(id, "its session to the source ended: "+c.s.Ended().String())
	}
	for id, b := range t.bound {
		if b == c {
			delete(t.bound, id)
		}
	}
}

// failLoadsOf counts a dead session's loads (their results were published
// by its Close; their slots wait for DataClosed).
func (t *Table) failLoadsOf(c *conn) int {
	n := 0
	for _, j := range t.jobs {
		if j.kind == JobLoad && j.conn == c.id {
			n++
		}
	}
	return n
}

// evictIdle says goodbye to ready sessions that carried nothing for
// IdleTimeout and have nothing in flight.
func (t *Table) evictIdle(now time.Time) {
	if t.cfg.IdleTimeout <= 0 {
		return
	}
	t.visitDue(qIdle, now, func(c *conn) {
		if c.s.Ready() && !c.s.Busy() && c.s.IdleFor(now) >= t.cfg.IdleTimeout {
			t.log.Info("evicting idle session", "peer", c.peer, "idle", c.s.IdleFor(now))
			c.s.Goodbye(now, wire.GoodbyeIdle)
			t.touch(c)
		}
	})
}

// wasReaped reports whether id's stores were reaped less than
// ReapedRetention ago. The age is checked here, not left to the pruning,
// so that when a tick prunes (and whether the owner skipped ticks with
// nothing due: NextDeadline) cannot change what a late fetch is told.
func (t *Table) wasReaped(now time.Time, id string) bool {
	at, ok := t.reaped[id]
	return ok && now.Sub(at) < t.cfg.ReapedRetention
}

// reapUnbound fails PD stores that no fetch bound within the timeout.
func (t *Table) reapUnbound(now time.Time) {
	if now.Sub(t.lastPrune) >= time.Second {
		// The reaped ids are kept for minutes: pruning them once a second
		// keeps a tick cheap. Pruning only frees memory (wasReaped).
		t.lastPrune = now
		for id, at := range t.reaped {
			if now.Sub(at) >= t.cfg.ReapedRetention {
				delete(t.reaped, id)
			}
		}
	}
	if len(t.unbound) == 0 {
		return // every tick of every node comes here: skip the map walk
	}
	for id, batches := range t.unbound {
		if len(batches) == 0 || now.Sub(batches[0].at) < t.cfg.UnboundStoreTimeout {
			continue
		}
		t.log.Warn("unbound store timed out without a fetch", "req", id,
			"after", now.Sub(batches[0].at), "jobs", len(batches))
		for _, b := range batches {
			t.storeDoneJob(b.job, false, ReasonUnboundTimeout)
		}
		delete(t.unbound, id)
		delete(t.finished, id)
		delete(t.decoders, id) // a late fetch is refused as reaped
		t.markFailed(id, ReasonUnboundTimeout)
		t.reaped[id] = now
	}
}

func (t *Table) storeDoneJob(jobID uint64, ok bool, reason string) {
	j := t.jobs[jobID]
	if j == nil {
		return
	}
	t.moveJob(j, jobDone)
	for _, sl := range j.slots {
		_ = t.store.Unpin(sl)
	}
	t.publish(JobResult{Job: jobID, Kind: JobStore, ReqID: j.req, OK: ok, Reason: reason}, j.at)
}

// shutdownStep closes every session once transfers drained or the drain
// time ran out, and fails what is still parked.
func (t *Table) shutdownStep(now time.Time) {
	if !t.shuttingDown || t.shutdownClose {
		return
	}
	busy := false
	for _, c := range t.conns {
		if c.s.Ended() == health.CauseNone && c.s.Busy() {
			busy = true
		}
	}
	if busy && now.Sub(t.shutdownAt) < t.cfg.ShutdownDrain {
		return
	}
	t.shutdownClose = true
	for _, c := range t.conns {
		t.reject(c) // an orderly local stop is nobody's fault
		c.s.Goodbye(now, wire.GoodbyeShutdown)
		t.touch(c)
	}
	for id, batches := range t.unbound {
		for _, b := range batches {
			t.storeDoneJob(b.job, false, "shutting down")
		}
		delete(t.unbound, id)
	}
}
