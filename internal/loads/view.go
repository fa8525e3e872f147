package loads

import (
	"cmp"
	"slices"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
)

// Session states in a View.
const (
	SessionConnecting = "connecting" // dialed or accepted, handshake not done
	SessionReady      = "ready"
	SessionEnded      = "ended" // ended, its data path not closed yet
)

// SessionView is one session as an operator sees it.
type SessionView struct {
	Conn     ConnID
	Peer     string
	Domain   string // as named by a request or by the peer's Hello; "" if neither
	Outbound bool
	State    string
	Cause    string // why it ended; "" while it has not
	Since    time.Time
	// Slow: a load on it delivers, but too slowly to finish within its
	// deadline with a margin (session.Session.Slow): alive, not faulty.
	Slow bool
}

// JobView is one load or store the table holds.
type JobView struct {
	Job       uint64
	Kind      JobKind
	ReqID     string
	Conn      ConnID // the session carrying it
	Blocks    int
	Submitted time.Time
}

// View is a read-only copy of what the table holds, for status and
// metrics. Taking it changes nothing.
type View struct {
	Sessions []SessionView // in creation order
	Jobs     []JobView     // in submission order
	Domains  []health.DomainView
	Policy   health.Stats
	Requests int // engine requests registered
	// Fetches: producer request ids a peer's PD fetch is bound to (its
	// decoder waits for, or is being sent, their blocks).
	Fetches int
	// SlowSessions: sessions with Slow set.
	SlowSessions int
}

// View copies the table's state at now.
func (t *Table) View(now time.Time) View {
	v := View{Requests: len(t.reqs), Fetches: len(t.bound)}
	for _, c := range t.list {
		if c.st == connGone || c.rejected {
			continue
		}
		sv := SessionView{
			Conn: c.id, Peer: c.peer, Domain: t.peerOf(c).Domain, Outbound: c.s.Outbound(),
			State: SessionConnecting, Since: c.s.PendingSince(),
		}
		switch {
		case c.s.Ended() != health.CauseNone:
			sv.State, sv.Cause = SessionEnded, c.s.Ended().String()
		case c.s.Ready():
			sv.State = SessionReady
			if sv.Slow = c.s.Slow(now); sv.Slow {
				v.SlowSessions++
			}
		}
		v.Sessions = append(v.Sessions, sv)
	}
	for _, j := range t.jobs {
		v.Jobs = append(v.Jobs, JobView{Job: j.id, Kind: j.kind, ReqID: j.req, Conn: j.conn,
			Blocks: max(len(j.keys), len(j.slots)), Submitted: j.at})
	}
	slices.SortFunc(v.Jobs, func(a, b JobView) int { return cmp.Compare(a.Job, b.Job) })
	if pv, ok := t.policy.(health.Viewer); ok {
		v.Domains, v.Policy = pv.View(now)
	}
	return v
}

// ClosedByPolicy reports whether the policy closed session id (its probe
// went unanswered); false once the table no longer holds it.
func (t *Table) ClosedByPolicy(id ConnID) bool {
	c := t.conns[id]
	return c != nil && c.endedBy == endedByPolicy
}
