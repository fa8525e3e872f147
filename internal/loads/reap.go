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

// reap handles every session that ended since the last reap: the policy
// says what else closes in the same reap (through the same teardown), the
// ended sessions' request ids go into the failed set so their lookups are
// MISS, and their producer bindings are purged.
func (t *Table) reap(now time.Time) {
	for len(t.ended) > 0 {
		ended := t.ended
		t.ended = nil
		for _, c := range ended {
			if c.reaped {
				continue // reaped by a nested reap (applyDecisions)
			}
			c.reaped = true
			cause := c.s.Ended()
			failedIDs := c.s.FailedRequests()
			n := t.failLoadsOf(c)
			for _, id := range failedIDs {
				t.markFailed(id)
			}
			for id, b := range t.bound {
				if b == c {
					delete(t.bound, id)
				}
			}
			if c.rejected {
				continue // never a session: the policy does not see it
			}
			t.log.Warn("peer down", "peer", c.peer, "cause", cause.String(), "loads_failed", n, "policy", t.policy.Name())
			end := health.End{Cause: cause, Restart: c.restart, LoadsFailed: n, ByPolicy: c.byPolicy, WasUp: c.up}
			for _, p := range t.policy.SessionEnded(now, t.peerOf(c), end) {
				o := t.byPeer[p.ID]
				if o == nil || o.reaped || o.s.Ended() != health.CauseNone {
					continue
				}
				t.log.Warn("closing sibling with its dead peer", "peer", o.peer, "dead_peer", c.peer, "policy", t.policy.Name())
				o.reaped = true // collateral: closed here, not fed back to the policy
				o.s.Close(now, cause)
				t.drain(now, o)
				for _, id := range o.s.FailedRequests() {
					t.markFailed(id)
				}
				for id, b := range t.bound {
					if b == o {
						delete(t.bound, id)
					}
				}
			}
			t.applyDecisions(now)
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
	for _, c := range t.list {
		if !c.gone && c.s.Ready() && !c.s.Busy() && c.s.IdleFor(now) >= t.cfg.IdleTimeout {
			t.log.Info("evicting idle session", "peer", c.peer, "idle", c.s.IdleFor(now))
			c.s.Goodbye(now, wire.GoodbyeIdle)
			t.drain(now, c)
		}
	}
}

// reapUnbound fails PD stores that no fetch bound within the timeout.
func (t *Table) reapUnbound(now time.Time) {
	if now.Sub(t.lastPrune) >= time.Second {
		// The reaped ids are kept for minutes: pruning them once a second
		// keeps a tick cheap.
		t.lastPrune = now
		for id, at := range t.reaped {
			if now.Sub(at) >= t.cfg.ReapedRetention {
				delete(t.reaped, id)
			}
		}
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
		t.markFailed(id)
		t.reaped[id] = now
	}
}

func (t *Table) storeDoneJob(jobID uint64, ok bool, reason string) {
	j := t.jobs[jobID]
	if j == nil {
		return
	}
	delete(t.jobs, jobID)
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
		c.rejected = true // an orderly local stop is nobody's fault
		c.s.Goodbye(now, wire.GoodbyeShutdown)
		t.drain(now, c)
	}
	for id, batches := range t.unbound {
		for _, b := range batches {
			t.storeDoneJob(b.job, false, "shutting down")
		}
		delete(t.unbound, id)
	}
}
