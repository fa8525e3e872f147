package sim

import (
	"github.com/kvp2p/kvp2p/internal/wire"
)

// Slots measured while running (issue 8): counting leaks only after every
// table has shut down and drained can hardly fail, since closing sessions
// releases everything anyway. So at every engine step the runner also
// counts, over the fleet, the slots in use (Filling or Pinned: the peak is
// reported) and those that nothing owns (the worst count is reported):
//
//   - a Filling slot is owned by a load job of its table (every load keeps
//     its destination slots until no peer write can land in them), so
//     Filling slots beyond what the table's loads hold are orphans;
//   - a pinned slot is owned by a store job (parked or bound) or by a
//     session's served lookup. Lookup pins are the session's and end with
//     it, so pinned slots beyond the store jobs' pins are orphans once the
//     table has no session left; while it has one they are given the
//     benefit of the doubt.
func (r *runner) checkSlots() {
	used, orphans := 0, 0
	for _, nd := range r.net.order {
		if nd.Crashed || nd.gone {
			continue
		}
		st := nd.Store.Stats()
		used += st.Filling + st.Pinned
		if st.Filling == 0 && st.Pinned == 0 {
			continue // nothing held, nothing to own (most ranks of a large fleet, most steps)
		}
		fill, pins, sessions := nd.T.Held()
		orphans += max(st.Filling-fill, 0)
		if sessions == 0 {
			orphans += max(st.Pinned-pins, 0)
		}
	}
	r.peak = max(r.peak, used)
	r.orphans = max(r.orphans, orphans)
}

// dropRelease is the deliberate leak of Options.leakAt: a slot of the
// first consumer reserved for no job, never released.
func (r *runner) dropRelease() {
	var k wire.Key
	copy(k[:], "sim: dropped release")
	if nd := r.node(r.cons[0]); nd != nil {
		_, _ = nd.Store.Reserve(k)
	}
}
