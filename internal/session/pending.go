package session

import (
	"time"

	"github.com/kvp2p/kvp2p/internal/wire"
)

// A lookup the producer still works on (LookupPending). A producer whose
// engine is starved of CPU (its steps take seconds, its processes wait
// for a core, none stopped) cannot answer a lookup of a block the engine
// holds until the engine steps. Rather than let the consumer's silence
// deadline (LookupTimeout) turn that wait into a fallback, its sidecar
// says so: the producer session sends LookupPending for each parked
// lookup waiting on the engine (SayPending), and the consumer re-arms its
// lookup deadline as a LookupResp would. A LookupResp still ends the
// lookup, HIT or MISS.
//
// The consumer bounds what a producer can hold it to: a lookup the peer
// said was pending is given up HoldFactor LookupTimeouts after it was
// sent, whatever the peer says meanwhile (a lying or broken producer
// holds a request no longer than that), and a re-arm never reaches past
// that cap. A LookupPending is proof of life as a Pong is (the session's
// heartbeat deadline), not activity for idle eviction and not an answer:
// it says the peer's node lives, not that its engine serves.

// HoldFactor is how many LookupTimeouts, from its first send, a lookup
// the peer said was pending may wait in all.
const HoldFactor = 4

// holdCap is how long after its first send a held lookup is given up.
func holdCap(s *Session) time.Duration { return HoldFactor * s.cfg.LookupTimeout }

func (c *client) onLookupPending(s *Session, now time.Time, m *wire.LookupPending) {
	id := lookupID{m.ReqID, m.Round}
	o, ok := c.outstanding[id]
	if !ok || s.cfg.LookupTimeout <= 0 {
		// Answered or abandoned meanwhile (the messages crossed), or no
		// lookup deadline to re-arm: nothing to do.
		c.pendingIgnored++
		s.logger().Debug("lookup-pending for no outstanding lookup: ignored", "req", m.ReqID, "round", m.Round)
		return
	}
	if !o.held {
		o.held = true
		c.outstanding[id] = o
	}
	// As a LookupResp would, but never past this lookup's cap.
	last := o.at.Add(holdCap(s) - s.cfg.LookupTimeout)
	if now.Before(last) {
		last = now
	}
	c.waitSince = later(c.waitSince, last)
}

// holdsExpired gives up the held lookups past their cap: their keys not
// answered yet read MISS.
func (c *client) holdsExpired(s *Session, now time.Time) {
	for id, o := range c.outstanding {
		if !o.held || now.Before(o.at.Add(holdCap(s))) {
			continue
		}
		s.logger().Warn("lookup the peer said was pending not answered within its cap: MISS",
			"req", id.req, "round", id.round, "waited", now.Sub(o.at))
		if r := c.reqs[id.req]; r != nil && r.round == id.round {
			r.missSent()
		}
		delete(c.outstanding, id)
	}
	dropEmpty(&c.outstanding)
}

// holdDeadlines adds the held lookups' caps to d.
func (c *client) holdDeadlines(s *Session, d *deadline) {
	for _, o := range c.outstanding {
		if o.held {
			d.at(o.at.Add(holdCap(s)))
		}
	}
}

// missSent answers MISS for r's keys still waiting on the peer's answer.
// Carried keys stay loadable: vLLM is not waiting on them (they read HIT),
// and a load of them from a silent peer fails by the load's own timers.
func (r *clientReq) missSent() {
	for k, st := range r.probes {
		if st == probeSent {
			r.probes[k] = probeMiss
		}
	}
}

// PendingIgnored counts the LookupPending messages that named no
// outstanding lookup of this session.
func (s *Session) PendingIgnored() uint64 { return s.client.pendingIgnored }

// SayPending tells the peer that its lookups parked here waiting on a key
// for which waiting is true are still worked on: one LookupPending each.
// It returns how many it sent.
func (s *Session) SayPending(now time.Time, waiting func(wire.Key) bool) int {
	if s.phase != ready {
		return 0
	}
	n := 0
	for _, pl := range s.server.parked {
		for _, i := range pl.wait {
			if waiting(pl.msg.Keys[i]) {
				s.send(now, &wire.LookupPending{ReqID: pl.msg.ReqID, Round: pl.msg.Round})
				n++
				break
			}
		}
	}
	return n
}
