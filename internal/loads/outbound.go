package loads

import (
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// EndOutboundIdle says Goodbye (idle) to every ready session this node
// dialed that has nothing in flight, and returns how many it ended. A
// sidecar calls it while no engine is attached: the sessions its gone
// engine opened serve nobody, and holding them until the idle timeout only
// keeps peers' resources. Sessions peers dialed stay: they are the peers'.
func (t *Table) EndOutboundIdle(now time.Time) int {
	n := 0
	for _, c := range t.list {
		if c.st == connGone || !c.s.Outbound() || !c.s.Ready() || c.s.Busy() || c.s.Ended() != health.CauseNone {
			continue
		}
		c.s.Goodbye(now, wire.GoodbyeIdle)
		t.touch(c)
		n++
	}
	t.settle(now)
	return n
}

// FailUnboundStores fails every parked PD store (no decoder fetched it
// yet) at once, and returns how many jobs it failed: a sidecar's engine is
// gone, so no decoder may read its chunks any more, and its restarted
// engine must get them back without waiting for the unbound timeout.
func (t *Table) FailUnboundStores(now time.Time, reason string) int {
	n := 0
	for id, batches := range t.unbound {
		for _, b := range batches {
			t.storeDoneJob(b.job, false, reason)
			n++
		}
		delete(t.unbound, id)
		delete(t.finished, id)
		t.markFailed(id)
		t.reaped[id] = now
	}
	t.settle(now)
	return n
}
