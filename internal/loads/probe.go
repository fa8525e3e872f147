package loads

import (
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
)

// ProbeAck reports that the peer on connection id answered data-path probe
// seq (see session.OpProbe). The failure-domain policy uses the answers to
// tell live siblings of a faulted rank from dead ones.
func (t *Table) ProbeAck(now time.Time, id ConnID, seq uint64) {
	c := t.conns[id]
	if c == nil || c.s.Ended() != 0 {
		return
	}
	if seq&holdSeqBit != 0 {
		t.holdAnswered(now, c, seq)
		t.settle(now)
		return
	}
	t.policy.ProbeAck(now, t.peerOf(c), seq)
	t.askPolicy = true
	t.settle(now)
}

// decide performs what the policy decided on its own (settle calls it):
// probes of live siblings' data paths, and closing the ones that did not
// answer. Having decided something, the policy is asked again once the
// consequences settled.
func (t *Table) decide(now time.Time) {
	ds := t.policy.TakeDecisions()
	if len(ds) == 0 {
		return
	}
	t.askPolicy = true
	for _, d := range ds {
		if d.Kind == health.DecideNote {
			t.log.Warn("failure policy: "+d.Note, "peer", d.Peer, "policy", t.policy.Name())
			continue
		}
		c := t.byPeer[d.Peer]
		if c == nil || c.s.Ended() != health.CauseNone {
			continue
		}
		switch d.Kind {
		case health.DecideProbe:
			c.s.Probe(now, d.Seq)
			_, c.watched = t.policy.(health.Witness)
		case health.DecideClose:
			t.log.Warn("closing a peer whose data path did not answer its probe", "peer", d.Peer, "cause", d.Cause.String())
			c.endedBy = endedByPolicy
			c.s.EndOnFault(now, d.Cause)
		}
		t.touch(c)
	}
}

// seen tells the policy that c's data path delivered at now (a chunk, a
// Progress frame, a terminal frame), while it checks that data path: a
// rank that delivers is alive however late its probe's answer
// (docs/liveness.md). Only watched sessions pay for the call.
func (t *Table) seen(now time.Time, c *conn) {
	if w, ok := t.policy.(health.Witness); ok && c.s.Ended() == health.CauseNone {
		c.watched = w.DataSeen(now, t.peerOf(c))
	}
}
