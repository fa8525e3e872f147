package sim

import (
	"fmt"
	"slices"
	"sync"
)

// Ticks by deadline. A node is a candidate for a tick at every IdleTick
// grid point, and at every Tick grid point while it has work in flight
// (the hot list). Of its candidate points it is ticked only at those where
// its table has something due (loads.Table.NextDeadline) or effects
// waiting: a Tick before the table's deadline is a no-op, so skipping it
// leaves the run as it was, while an idle node costs nothing between its
// deadlines. A skipped node's Flush would have performed nothing either.
//
// Bookkeeping: whatever may change a node's table or store (Flush, which
// every caller of a table runs; the engine adapters; a new node) touches
// it. At an idle grid point the touched nodes' deadlines are recomputed
// into a heap (wakes), and the nodes whose deadline has come are popped
// and ticked in creation order, as the full walk over every node did. Hot
// nodes are checked at each fine point directly.

// touch says nd's table or store may have changed.
func (n *Net) touch(nd *Node) {
	if !nd.isDirty {
		nd.isDirty = true
		n.dirty = append(n.dirty, nd)
	}
	if !nd.watch {
		nd.watch = true
		n.watched = append(n.watched, nd)
	}
}

// wake puts nd on the list of nodes that may need fine ticks.
func (n *Net) wake(nd *Node) {
	if !nd.inHot {
		nd.inHot = true
		n.hot = append(n.hot, nd)
	}
}

func (nd *Node) tickable() bool { return !nd.Crashed && !nd.gone && !nd.stalled }

// deadline is when nd next needs a tick (ns since start), and false if
// never until something touches it.
func (n *Net) deadline(nd *Node) (int64, bool) {
	if nd.T.HasEffects() {
		return n.now, true
	}
	at, ok := nd.T.NextDeadline()
	if !ok {
		return 0, false
	}
	return int64(at.Sub(n.start)), true // the zero time saturates: at once
}

// dueAt reports whether nd needs a tick at t.
func (n *Net) dueAt(nd *Node, t int64) bool {
	if n.TickEvery {
		return true
	}
	at, ok := n.deadline(nd)
	return ok && at <= t
}

// refresh recomputes the touched nodes' deadlines into the heap.
func (n *Net) refresh() {
	for i, nd := range n.dirty {
		n.dirty[i] = nil
		nd.isDirty = false
		if nd.gone {
			n.wakes.remove(nd)
			continue
		}
		if at, ok := n.deadline(nd); ok {
			n.wakes.set(nd, at)
		} else {
			n.wakes.remove(nd)
		}
	}
	n.dirty = n.dirty[:0]
}

func (n *Net) tickAll(t int64) {
	idle := max(n.IdleTick, n.Tick)
	full := n.FineAll || t%int64(idle) == 0
	batch := n.batch[:0]
	if full && n.TickEvery {
		for _, nd := range n.order {
			batch = n.due(batch, nd, t)
		}
	} else if full {
		n.refresh()
		for len(n.wakes) > 0 && n.wakes[0].wake <= t {
			nd := n.wakes[0]
			n.wakes.remove(nd)
			if !nd.tickable() {
				n.touch(nd) // looked at again at the next idle point
				continue
			}
			batch = n.due(batch, nd, t)
		}
	}
	for i := 0; i < len(n.hot); {
		nd := n.hot[i]
		if nd.gone || nd.Crashed || !(nd.Busy || nd.work > 0) {
			nd.inHot = false
			last := len(n.hot) - 1
			n.hot[i] = n.hot[last]
			n.hot[last] = nil
			n.hot = n.hot[:last]
			continue
		}
		if nd.lastTick != t && nd.tickable() && n.dueAt(nd, t) {
			batch = n.due(batch, nd, t)
		}
		i++
	}
	if full {
		// The full walk went in creation order, then the hot nodes it had
		// not met (none: it met every node).
		slices.SortFunc(batch, func(a, b *Node) int { return int(a.seq) - int(b.seq) })
	}
	if n.CheckSkips {
		n.checkSkipped(batch, t, full)
	}
	n.ticks += uint64(len(batch))
	if w := min(n.Workers, len(batch)/parallelMin); w > 1 {
		var wg sync.WaitGroup
		for i := range w {
			wg.Go(func() {
				for j := i; j < len(batch); j += w { // strided: costly nodes spread out
					batch[j].T.Tick(n.Now)
				}
			})
		}
		wg.Wait()
	} else {
		for _, nd := range batch {
			nd.T.Tick(n.Now)
		}
	}
	for _, nd := range batch {
		n.Flush(nd)
	}
	clear(batch)
	n.batch = batch[:0]
}

// parallelMin is the least number of ticks per worker worth a goroutine.
const parallelMin = 32

// due appends nd to the nodes to tick at t, once.
func (n *Net) due(batch []*Node, nd *Node, t int64) []*Node {
	if nd.lastTick == t || !nd.tickable() {
		return batch
	}
	nd.lastTick = t
	return append(batch, nd)
}

// checkSkipped (CheckSkips) finds a node that the walk the simulator did
// before would have ticked at t with something due, and that was skipped.
func (n *Net) checkSkipped(batch []*Node, t int64, full bool) {
	if n.skipErr != nil {
		return
	}
	for _, nd := range n.order {
		if nd.lastTick == t || !nd.tickable() {
			continue
		}
		if !full && !(nd.inHot && (nd.Busy || nd.work > 0)) {
			continue // not a candidate at a fine point
		}
		if at, ok := n.deadline(nd); ok && at <= t {
			n.skipErr = fmt.Errorf("sim: node %s skipped at %v with a deadline at %v", nd.ID, t, at)
			return
		}
	}
}

// SkipError is the first skipped tick that CheckSkips found due, or the
// first slot count that differed from a full walk, or nil.
func (n *Net) SkipError() error { return n.skipErr }

// wakeHeap is a min-heap of nodes by their next deadline.
type wakeHeap []*Node

func (h wakeHeap) less(i, j int) bool { return h[i].wake < h[j].wake }

func (h wakeHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].wi = i + 1
	h[j].wi = j + 1
}

func (h wakeHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h wakeHeap) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h.less(r, l) {
			m = r
		}
		if !h.less(m, i) {
			return
		}
		h.swap(i, m)
		i = m
	}
}

// set puts nd in the heap at deadline at, or moves it there.
func (h *wakeHeap) set(nd *Node, at int64) {
	if nd.wi > 0 && nd.wake == at {
		return
	}
	nd.wake = at
	if i := nd.wi - 1; i >= 0 {
		h.up(i)
		h.down(nd.wi - 1)
		return
	}
	*h = append(*h, nd)
	nd.wi = len(*h)
	h.up(len(*h) - 1)
}

// remove takes nd out of the heap, if it is in it.
func (h *wakeHeap) remove(nd *Node) {
	i := nd.wi - 1
	if i < 0 {
		return
	}
	last := len(*h) - 1
	if i != last {
		h.swap(i, last)
	}
	(*h)[last] = nil
	*h = (*h)[:last]
	nd.wi = 0
	if i != last {
		h.up(i)
		h.down(i)
	}
}
