package loads

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Timers by deadline. Tick visits only the sessions whose timers are due,
// so an idle session costs nothing per tick. Each conn sits in two
// min-heaps by deadline: qTimer (its session's timers, its linger, and
// output to collect) and qIdle (idle eviction). Whatever touches a session
// marks its conn dirty (touch and collect do it); the next rescheduleDirty recomputes its
// deadlines. A tick visits the due conns of a queue in creation order, as
// the full scan it replaces did, including a conn that falls due during
// the visit after the cursor (something an earlier conn's timer did to
// it): the scan would have found it due when it got there. Visiting a conn
// that turns out not to be due is harmless (Tick finds nothing to do).
const (
	qTimer = iota
	qIdle
	nQueues
)

// timerState is a conn's place in the queues.
type timerState struct {
	at    [nQueues]time.Time
	hi    [nQueues]int  // index in the heap + 1; 0: not in it
	inDue [nQueues]bool // taken out for the visit in progress
	dirty bool
}

// timerQueue is a min-heap of conns by deadline for one queue. Each entry
// carries its deadline, so that comparing two does not reach into two
// conns (a large fleet's sessions are far apart in memory).
type timerQueue struct {
	k int
	h []timerEntry
}

type timerEntry struct {
	at time.Time
	c  *conn
}

func (q *timerQueue) less(i, j int) bool { return q.h[i].at.Before(q.h[j].at) }

func (q *timerQueue) swap(i, j int) {
	q.h[i], q.h[j] = q.h[j], q.h[i]
	q.h[i].c.tm.hi[q.k] = i + 1
	q.h[j].c.tm.hi[q.k] = j + 1
}

func (q *timerQueue) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !q.less(i, p) {
			return
		}
		q.swap(i, p)
		i = p
	}
}

func (q *timerQueue) down(i int) {
	n := len(q.h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && q.less(r, l) {
			m = r
		}
		if !q.less(m, i) {
			return
		}
		q.swap(i, m)
		i = m
	}
}

// set puts c in the heap at deadline at, or moves it there.
func (q *timerQueue) set(c *conn, at time.Time) {
	i := c.tm.hi[q.k] - 1
	if i >= 0 && c.tm.at[q.k].Equal(at) {
		// Most messages leave a session's deadline where it was. The copy
		// in the conn says so without reaching into the heap.
		return
	}
	c.tm.at[q.k] = at
	if i >= 0 {
		q.h[i].at = at
		q.up(i)
		q.down(c.tm.hi[q.k] - 1)
		return
	}
	q.h = append(q.h, timerEntry{at: at, c: c})
	c.tm.hi[q.k] = len(q.h)
	q.up(len(q.h) - 1)
}

// remove takes c out of the heap, if it is in it.
func (q *timerQueue) remove(c *conn) {
	i := c.tm.hi[q.k] - 1
	if i < 0 {
		return
	}
	last := len(q.h) - 1
	if i != last {
		q.swap(i, last)
	}
	q.h[last] = timerEntry{}
	q.h = q.h[:last]
	c.tm.hi[q.k] = 0
	if i != last {
		q.up(i)
		q.down(i)
	}
}

// popDue takes out the conn with the earliest deadline if it is due.
func (q *timerQueue) popDue(now time.Time) *conn {
	if len(q.h) == 0 || q.h[0].at.After(now) {
		return nil
	}
	c := q.h[0].c
	q.remove(c)
	return c
}

// next is the earliest deadline in the queue, if any.
func (q *timerQueue) next() (time.Time, bool) {
	if len(q.h) == 0 {
		return time.Time{}, false
	}
	return q.h[0].at, true
}

// visit is the queue walk in progress (one at a time).
type visit struct {
	active bool
	k      int
	now    time.Time
	cursor ConnID // the conn being visited
	maxID  ConnID // conns made during the visit wait for the next tick
	due    []*conn
	pos    int
	behind []*conn // dirty conns at or behind the cursor (rescheduleDirty)
}

// markDirty says c's deadlines may have changed.
func (t *Table) markDirty(c *conn) {
	if !c.tm.dirty {
		c.tm.dirty = true
		t.dirty = append(t.dirty, c)
	}
}

// deadline is c's deadline in queue k.
func (t *Table) deadline(c *conn, k int) (time.Time, bool) {
	if c.st == connGone {
		return time.Time{}, false
	}
	if k == qIdle {
		return c.s.IdleDeadline(t.cfg.IdleTimeout)
	}
	if !c.s.OutEmpty() || (c.rep == unreported && c.s.Ready() && !c.rejected && c.holdFor == nil) {
		return time.Time{}, true // collect has work at once
	}
	at, ok := c.s.NextDeadline()
	if c.holdFor != nil && (!ok || c.holdUntil.Before(at)) {
		at, ok = c.holdUntil, true // checkHold (collect's) replaces the silent old session
	}
	if c.st == connLingering {
		// closeIfDone (collect's) ends the linger at its time, or at once
		// when the last lingering load finished.
		l := c.linger
		if !c.s.Lingering() {
			l = time.Time{}
		}
		if !ok || l.Before(at) {
			at, ok = l, true
		}
	}
	return at, ok
}

// rescheduleDirty recomputes the deadlines of the dirty conns.
// During a walk, a conn at or behind the cursor cannot join it: it stays
// dirty and is recomputed once after the walk. The conn just visited is
// one: its session's output (a Ping) is not collected yet, so its deadline
// now would be "at once", and rescheduling it would carry it to the top of
// the heap and back down again after settle.
func (t *Table) rescheduleDirty() {
	v := &t.visit
	for len(t.dirty) > 0 {
		c := t.dirty[len(t.dirty)-1]
		t.dirty[len(t.dirty)-1] = nil
		t.dirty = t.dirty[:len(t.dirty)-1]
		if v.active && c.id <= v.cursor {
			v.behind = append(v.behind, c) // still marked dirty
			continue
		}
		c.tm.dirty = false
		for k := range nQueues {
			t.reschedule(c, k)
		}
	}
}

func (t *Table) reschedule(c *conn, k int) {
	if c.tm.inDue[k] {
		return // rescheduled after its visit
	}
	q := &t.queues[k]
	at, ok := t.deadline(c, k)
	if !ok {
		q.remove(c)
		return
	}
	v := &t.visit
	if v.active && v.k == k && !at.After(v.now) && c.id > v.cursor && c.id <= v.maxID {
		// Fell due during the walk, ahead of the cursor: the scan would
		// have found it due on reaching it.
		q.remove(c)
		c.tm.inDue[k] = true
		i, _ := slices.BinarySearchFunc(v.due[v.pos:], c.id, func(a *conn, id ConnID) int { return cmp.Compare(a.id, id) })
		v.due = slices.Insert(v.due, v.pos+i, c)
		return
	}
	q.set(c, at)
}

// visitDue calls fn on every conn whose deadline in queue k is at or
// before now, in creation order (see the top of this file).
func (t *Table) visitDue(k int, now time.Time, fn func(*conn)) {
	t.rescheduleDirty()
	q := &t.queues[k]
	v := &t.visit
	v.active, v.k, v.now, v.cursor, v.maxID = true, k, now, 0, t.nextConn
	for c := q.popDue(now); c != nil; c = q.popDue(now) {
		c.tm.inDue[k] = true
		v.due = append(v.due, c)
	}
	slices.SortFunc(v.due, func(a, b *conn) int { return cmp.Compare(a.id, b.id) })
	for v.pos < len(v.due) {
		c := v.due[v.pos]
		v.due[v.pos] = nil
		v.pos++
		v.cursor = c.id
		c.tm.inDue[k] = false
		if c.st != connGone {
			fn(c)
		}
		t.markDirty(c)
		t.rescheduleDirty()
	}
	v.active = false
	v.due = v.due[:0]
	v.pos = 0
	t.dirty = append(t.dirty, v.behind...)
	clear(v.behind)
	v.behind = v.behind[:0]
}

// NextDeadline is the earliest instant at which Tick has something to do,
// and true; false when nothing is pending until another call. The zero
// time means at once. A Tick before it changes nothing that a call or an
// effect can observe (it may compact the conn list or prune expired
// reaped ids: bookkeeping only), so an owner may skip it: the simulator
// ticks a node only at its deadlines. It covers what Tick runs: the
// sessions' timers and idle eviction (the queues above), the policy's
// timers (health.Policy.NextDeadline), parked stores' unbound timeout,
// and a shutdown in progress. Effects not taken yet are the owner's
// business (HasEffects), not Tick's.
func (t *Table) NextDeadline() (time.Time, bool) {
	if t.shuttingDown && !t.shutdownClose {
		return time.Time{}, true // shutdownStep checks every tick
	}
	t.rescheduleDirty()
	var at time.Time
	ok := false
	earliest := func(d time.Time) {
		if !ok || d.Before(at) {
			at, ok = d, true
		}
	}
	if d, qok := t.queues[qTimer].next(); qok {
		earliest(d)
	}
	if d, qok := t.queues[qIdle].next(); qok && t.cfg.IdleTimeout > 0 {
		earliest(d)
	}
	if d, pok := t.policy.NextDeadline(); pok {
		earliest(d)
	}
	if len(t.unbound) > 0 { // ranging over an empty map still costs an iterator
		for _, batches := range t.unbound {
			if len(batches) > 0 {
				earliest(batches[0].at.Add(t.cfg.UnboundStoreTimeout))
			}
		}
	}
	return at, ok
}

// HasEffects reports whether TakeEffects has anything to return.
func (t *Table) HasEffects() bool { return len(t.actions) > 0 || len(t.results) > 0 }

// checkTimers (Config.CheckTimers) compares every queued deadline with a
// fresh computation: a queued deadline later than the real one is a timer
// the table would miss. It records the first such finding.
func (t *Table) checkTimers() {
	if t.timerErr != nil {
		return
	}
	if n := t.countLive(); t.nLive != n {
		t.timerErr = fmt.Errorf("loads: %d live sessions kept, %d in the table", t.nLive, n)
		return
	}
	for _, c := range t.list {
		for k := range nQueues {
			at, ok := t.deadline(c, k)
			if !ok {
				continue
			}
			if c.tm.hi[k] == 0 {
				t.timerErr = fmt.Errorf("loads: conn %d (peer %q) has a deadline %v in queue %d but is not queued", c.id, c.peer, at, k)
				return
			}
			if at.Before(c.tm.at[k]) {
				t.timerErr = fmt.Errorf("loads: conn %d (peer %q) queued at %v in queue %d, due at %v", c.id, c.peer, c.tm.at[k], k, at)
				return
			}
		}
	}
}

// TimerError is the first inconsistency checkTimers found (tests).
func (t *Table) TimerError() error { return t.timerErr }
