package demo

import "github.com/kvp2p/kvp2p/internal/node"

// Slots checked while running (issue 8), as the simulator does at every
// engine step: after each step the demo takes every live node's
// node.SlotUse (its store's Filling and Pinned slots and what its loads,
// store jobs and sessions hold, counted in one turn of the node's loop) and
// keeps the peak of slots in use over the fleet and the worst count of
// orphans: slots that no load, store job or live session owns. Counting
// only after shutdown (leaked_slots) can hardly fail, since closing
// sessions releases everything anyway.
//
// A crashed rank is skipped (the process and its store are gone); a
// stalled one is counted (its node keeps running: only its sockets hold
// still). Each node's counts are taken in its own loop, so its orphans are
// exact; the fleet's sum of slots in use mixes instants a few microseconds
// apart, which is what "peak" means on real sockets.
type slotCheck struct {
	peak, orphans int
	// use takes a rank's counts; nil: its Manager's SlotUse. Tests replace
	// it to drop a release.
	use func(rk *demoRank) (node.SlotUse, error)
}

// check takes one sample over the fleet's live ranks.
func (c *slotCheck) check(ranks []*demoRank) {
	used, orphans := 0, 0
	for _, rk := range ranks {
		if rk.node == nil {
			continue
		}
		var u node.SlotUse
		var err error
		if c.use != nil {
			u, err = c.use(rk)
		} else {
			u, err = rk.m.SlotUse()
		}
		if err != nil {
			continue // the node stopped between the fault and this step
		}
		used += u.InUse()
		orphans += u.Orphans()
	}
	c.peak = max(c.peak, used)
	c.orphans = max(c.orphans, orphans)
}
