package loads

import "github.com/kvp2p/kvp2p/internal/health"

// Attempts returns how many connect attempts to peer are live and pending:
// the current one and its racers. Unlike the table's own liveRacers it
// only reads: a test that looks must not change what it looks at.
func (t *Table) Attempts(peer string) int {
	n := 0
	for _, r := range t.racers[peer] {
		if r.liveRacer() {
			n++
		}
	}
	if c := t.byPeer[peer]; c != nil && c.s.Outbound() && c.s.Pending() && c.s.Ended() == health.CauseNone {
		n++
	}
	return n
}

// CanonPeer is canonPeer, for the external tests.
func CanonPeer(id string) string { return canonPeer(id) }
