package demo

import "github.com/kvp2p/kvp2p/internal/node"

// A loaded block the read-back does not find was either evicted (its slot
// reused by a later load or put: an engine, which reads a load into its
// own memory when it completes, never sees that) or lost by a bug. The
// store drops a committed block only by evicting it (keys are distinct per
// request, so no commit supersedes it, and the demo's nodes never remove
// one), so the consumer's eviction count tells the two apart:
//
//   - every result a poll returns was committed after the previous poll
//     ran in the node's loop, hence after the count read just before that
//     poll (prev below);
//   - so a block evicted between its commit and its read-back leaves the
//     count above prev when it is read back. A missing block with the
//     count still at prev was not evicted: it vanished, and the load is
//     corrupt.
//
// Issue 14's "corrupt load under per-peer" was a read-back that counted a
// missing block as corrupt; this is what makes "missing" a proof rather
// than an excuse.

// evictWitness is one consumer incarnation's eviction count around polls.
type evictWitness struct {
	node       *node.Node
	prev, last uint64 // the count before the previous poll, before the last one
}

// beforePoll is called just before each PollFinished of the consumer.
func (r *Run) beforePoll(d demoNode) {
	w := r.witness(d)
	w.prev, w.last = w.last, d.m.Evictions()
}

// missing classifies a loaded block the read-back did not find.
func (r *Run) missing(d demoNode) blockCheck {
	if d.m.Evictions() > r.witness(d).prev {
		return blockMissing
	}
	return blockVanished
}

// witness is the consumer's witness; a new incarnation starts at zero,
// which is at or before every poll of it.
func (r *Run) witness(d demoNode) *evictWitness {
	if r.evict == nil {
		r.evict = map[*demoRank]*evictWitness{}
	}
	w := r.evict[d.rk]
	if w == nil || w.node != d.node {
		w = &evictWitness{node: d.node}
		r.evict[d.rk] = w
	}
	return w
}
