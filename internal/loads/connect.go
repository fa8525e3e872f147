package loads

import "time"

// Connect opens a session to peer unless one exists or is being opened,
// and reports whether there is one (ready or not): how a node keeps
// sessions to the members of its deployment, for their summaries
// (internal/summary), with no request naming them. The policy and the peer
// cap apply as for a request.
func (t *Table) Connect(now time.Time, peer string) bool {
	c := t.session(now, peer, "")
	t.settle(now)
	return c != nil
}
