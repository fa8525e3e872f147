package loads

import "time"

// ProbeAck reports that the peer on connection id answered data-path probe
// seq (see session.OpProbe). The failure-domain policy uses the answers to
// tell live siblings of a faulted rank from dead ones.
func (t *Table) ProbeAck(now time.Time, id ConnID, seq uint64) {
	c := t.conns[id]
	if c == nil || c.s.Ended() != 0 {
		return
	}
	t.probeAnswered(now, c, seq)
}

// probeAnswered is filled in by the domain policy's wiring.
func (t *Table) probeAnswered(now time.Time, c *conn, seq uint64) {}
