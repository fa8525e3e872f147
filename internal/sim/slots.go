package sim

import (
	"fmt"

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
//
// Only the nodes touched since the last count, or holding slots at it, are
// looked at (Net.watched): a store changes only through its table or the
// engine, and both touch the node (wake.go), so any other node holds
// nothing, as it did at the count before.
func (r *runner) checkSlots() {
	n := r.net
	used, orphans := 0, 0
	kept := n.watched[:0]
	for _, nd := range n.watched {
		u, o, holds := slotsOf(nd)
		used += u
		orphans += o
		if holds || (nd.Crashed && !nd.gone) {
			kept = append(kept, nd)
		} else {
			nd.watch = false
		}
	}
	clear(n.watched[len(kept):])
	n.watched = kept
	if n.CheckSkips && n.skipErr == nil {
		u, o := 0, 0
		for _, nd := range n.order {
			du, do, _ := slotsOf(nd)
			u += du
			o += do
		}
		if u != used || o != orphans {
			n.skipErr = fmt.Errorf("sim: slots at %v: %d used, %d orphans; a walk over every node finds %d, %d", n.Now, used, orphans, u, o)
		}
	}
	r.peak = max(r.peak, used)
	r.orphans = max(r.orphans, orphans)
}

// slotsOf is a node's slots Filling or Pinned and how many of them nothing
// owns; holds says whether it holds any (a crashed or replaced node counts
// none).
func slotsOf(nd *Node) (used, orphans int, holds bool) {
	if nd.Crashed || nd.gone {
		return 0, 0, false
	}
	st := nd.Store.Stats()
	if st.Filling == 0 && st.Pinned == 0 {
		return 0, 0, false // nothing held, nothing to own (most ranks of a large fleet, most steps)
	}
	fill, pins, sessions := nd.T.Held()
	orphans = max(st.Filling-fill, 0)
	if sessions == 0 {
		orphans += max(st.Pinned-pins, 0)
	}
	return st.Filling + st.Pinned, orphans, true
}

// dropRelease is the deliberate leak of Options.leakAt: a slot of the
// first consumer reserved for no job, never released.
func (r *runner) dropRelease() {
	var k wire.Key
	copy(k[:], "sim: dropped release")
	if nd := r.node(r.cons[0]); nd != nil {
		_, _ = nd.Store.Reserve(k)
		r.net.touch(nd)
	}
}
