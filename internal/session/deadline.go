package session

import "time"

// deadline is the earliest of the times offered to it.
type deadline struct {
	t  time.Time
	ok bool
}

func (d *deadline) at(t time.Time) {
	if !d.ok || t.Before(d.t) {
		d.t, d.ok = t, true
	}
}

// NextDeadline returns the earliest time at which Tick may act, and false
// if no timer is armed (Tick does nothing until an event arrives). The
// owner may skip Tick until then: a session that carries nothing costs
// nothing per tick. The answer is exact or early, never late: a Tick
// before it does nothing. It holds until the next call into the session
// other than DataProgress (which only moves timers later); an earlier
// answer is then merely a Tick that finds nothing to do.
//
// Each term mirrors a condition in Tick, client.tick or server.tick: a
// change to one of those must change this too (the loads and sim tests
// check the two against each other on every tick).
func (s *Session) NextDeadline() (time.Time, bool) {
	var d deadline
	switch s.phase {
	case ended, closed:
		return time.Time{}, false
	case connecting, handshaking:
		d.at(s.created.Add(s.cfg.HandshakeTimeout))
	case ready:
		d.at(s.lastRecv.Add(s.cfg.HeartbeatTimeout))
		d.at(s.lastSend.Add(s.cfg.HeartbeatInterval))
		s.client.deadline(s, &d)
	}
	s.server.deadline(s, &d)
	return d.t, d.ok
}

// IdleDeadline is when the session becomes evictable as idle after
// timeout, if it is ready with nothing in flight; false otherwise.
func (s *Session) IdleDeadline(timeout time.Duration) (time.Time, bool) {
	if timeout <= 0 || s.phase != ready || s.Busy() {
		return time.Time{}, false
	}
	return s.lastActive.Add(timeout), true
}

func (c *client) deadline(s *Session, d *deadline) {
	if len(c.outstanding) > 0 && s.cfg.LookupTimeout > 0 {
		d.at(c.waitSince.Add(s.cfg.LookupTimeout))
		c.holdDeadlines(s, d)
	}
	if len(c.loads) == 0 {
		return // ranging over an empty map still costs: most sessions are idle
	}
	for _, l := range c.loads {
		if l.reported {
			d.at(later(l.failedAt.Add(s.cfg.AbortAckTimeout), c.drainsUntil(s, l)))
			continue
		}
		d.at(l.submitted.Add(c.loadTimeout(s, l)))
		if !l.dataEnded && s.cfg.StallTimeout > 0 {
			d.at(c.silentSince(l).Add(s.stallWindow()))
		}
	}
}

func (sv *server) deadline(s *Session, d *deadline) {
	if len(sv.parked) > 0 {
		// Parked lookups are retried on every tick (they wait for keys
		// being filled, which no timer of ours announces).
		d.at(time.Time{})
		return
	}
	if len(sv.reqs) == 0 {
		return
	}
	for _, r := range sv.reqs {
		for _, rd := range r.rounds {
			if rd.aborting && rd.opened {
				d.at(rd.abortAt.Add(s.cfg.CancelDrainTimeout))
			}
			if !rd.opened {
				if rd.fromLookup && len(rd.storeJobs) == 0 {
					d.at(rd.created.Add(s.lookupPinTimeout()))
				}
				d.at(rd.created.Add(s.cfg.StoreTimeout))
			}
			if rd.opened && !rd.sentLast && len(rd.storeJobs) == 0 && len(rd.supply) == 0 {
				d.at(rd.created.Add(s.unbackedFetchTimeout()))
			}
		}
	}
}
