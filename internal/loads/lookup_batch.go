package loads

import (
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// LookupBatch is Lookup for each of keys in turn, for request id at now,
// key i's verdict in out[i] (len(out) >= len(keys)): the same verdicts,
// the same state and the same calls to the observer as len(keys)
// Lookups, and the same policy decisions (its Gate is asked once for a
// run of keys, not once per key: see lookupRun). It exists for the
// engine's step, which looks up a whole request's keys at once: a Lookup
// finds the request, its failed mark, its session and the policy's gate
// for every key, then settles, and at 1024 keys that was most of the
// sidecar's time in a step.
//
// The common case, a ready session whose policy gate is open and whose
// data path is not silent while owed (Table.silentPath), runs
// without those per-key steps (lookupRun); any other key takes Lookup.
func (t *Table) LookupBatch(now time.Time, id string, keys []wire.Key, out []session.Verdict) {
	for i := 0; i < len(keys); {
		n, g, asked := t.lookupRun(now, id, keys[i:], out[i:])
		i += n
		if i < len(keys) {
			out[i] = t.lookupObserved(now, id, keys[i], g, asked)
			i++
		}
	}
}

// lookupRun answers the leading keys whose Lookup would find the request's
// session ready and the policy's gate open, and returns how many. If the
// gate is not open, it answers none, and g is the gate's answer (asked)
// for the first key's Lookup to use instead of asking again.
//
// Why a run equals that many Lookups: the table is settled (nothing
// touched, the policy not to be asked, no end to reap), so each Lookup's
// settle would do nothing; such a lookup changes only the session's
// probes, the dirty mark and the flush queue, none of which the next
// key's checks read; and it marks nothing failed, so the observer hears
// nothing. Between the keys' Gates nothing calls the policy, and Gate is
// idempotent at one instant (health.Policy), so one Gate answers for the
// run; it is asked, as before, before the first key registers.
func (t *Table) lookupRun(now time.Time, id string, keys []wire.Key, out []session.Verdict) (n int, g health.Gate, asked bool) {
	if len(t.touched) > 0 || t.askPolicy || t.policyTick || len(t.ended) > 0 {
		return 0, 0, false
	}
	r := t.reqs[id]
	if r == nil || r.src == nil {
		return 0, 0, false
	}
	if _, bad := t.failed[r.src.kvID]; bad {
		return 0, 0, false
	}
	c := t.byPeer[r.src.peer]
	if c == nil || c.s.Ended() != health.CauseNone || c.s.Pending() || t.silentPath(now, r, c) {
		return 0, 0, false
	}
	if g = t.policy.Gate(now, t.peerOf(c)); g != health.GateOpen {
		return 0, g, true
	}
	n = len(keys)
	if r.src.pd {
		for i := range n {
			out[i] = session.Hit
		}
		return n, g, false
	}
	c.s.RegisterLookups(r.src.kvID, keys[:n], out[:n])
	t.markDirty(c)
	if !c.flush {
		for _, v := range out[:n] {
			if v == session.Retry {
				c.flush = true
				t.flushQ = append(t.flushQ, c)
				break
			}
		}
	}
	return n, g, false
}
