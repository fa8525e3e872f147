package node

import (
	"context"
	"sync/atomic"
	"time"
)

// lookupWaiter is a LookupWait parked in the loop until its verdict is no
// longer RETRY. The loop owns the list; the caller owns nothing but its end
// of ch (buffered: the loop never blocks on a caller that gave up).
type lookupWaiter struct {
	reqID string
	k     Key
	ch    chan Verdict
	gone  atomic.Bool // the caller stopped waiting: drop it
}

// LookupWait is Lookup that blocks until the verdict is HIT or MISS, or ctx
// ends (it then returns RETRY). The caller still flushes its probes with
// EndStep; the loop answers a parked waiter in the turn that settled its
// verdict, so a caller that has nothing else to do waits without polling
// (each poll is a hop into the loop that queues ahead of the lookup's own
// reply). After the node stopped it returns MISS, like Lookup.
func (m *Manager) LookupWait(ctx context.Context, reqID string, k Key) Verdict {
	w := &lookupWaiter{reqID: reqID, k: k, ch: make(chan Verdict, 1)}
	v := Miss
	if m.do(func(now time.Time) {
		if v = m.n.tb.Lookup(now, reqID, k); v == Retry {
			m.n.waiters = append(m.n.waiters, w)
		}
	}) != nil || v != Retry {
		return v
	}
	select {
	case v = <-w.ch:
		return v
	case <-ctx.Done():
		w.gone.Store(true)
		return Retry
	case <-m.n.done:
		w.gone.Store(true)
		return Miss
	}
}

// answerWaiters re-asks the table for every parked waiter after a loop turn
// and hands out the verdicts that settled. A turn with no waiters costs a
// length check; one with waiters costs a table lookup each, what the
// waiters' own polls would have cost, minus the hand-offs.
func (n *Node) answerWaiters() {
	if len(n.waiters) == 0 {
		return
	}
	now := n.clk.now(time.Now())
	kept := n.waiters[:0]
	for _, w := range n.waiters {
		if w.gone.Load() {
			continue
		}
		if v := n.tb.Lookup(now, w.reqID, w.k); v != Retry {
			w.ch <- v
			continue
		}
		kept = append(kept, w)
	}
	clear(n.waiters[len(kept):])
	n.waiters = kept
}
