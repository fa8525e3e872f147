package node

import (
	"sync/atomic"
	"time"
)

// loopClock is the time the node's decision core sees. It is wall time
// minus the loop's own lateness: when the loop's ticks come far apart (the
// process was starved of CPU, or one turn of the loop took long), the
// excess is time in which the node could not have heard its peers (their
// heartbeats, progress and probe answers sat in socket buffers and in the
// event queue), so it must not count as their silence. Timeouts are thus
// judged on the time the loop was able to listen. Readings never go back.
//
// Only the loop goroutine calls now and tick; the lateness figures are
// atomics, for LoopLateness.
type loopClock struct {
	prevTick time.Time     // wall time of the last tick taken; zero before the first
	debt     time.Duration // lateness excluded so far
	last     time.Time     // last reading
	starved  time.Duration // lateness of the last tick the cap left in the clock (takeStarved)

	maxLate   atomic.Int64 // longest excess of one tick gap, ns
	totalLate atomic.Int64 // debt, ns
	lateTicks atomic.Int64 // ticks that came late
}

// lateAllowance is how far apart two ticks may come before the excess is
// the loop's lateness: a tick period plus the scheduling jitter of a busy
// but healthy machine.
const lateAllowance = tickEvery + 40*time.Millisecond

// now is the clock's reading at wall time wall.
func (c *loopClock) now(wall time.Time) time.Time {
	t := wall.Add(-c.debt)
	if t.Before(c.last) {
		t = c.last
	}
	c.last = t
	return t
}

// tick records a tick taken at wall time wall and returns the reading:
// a gap since the previous tick beyond lateAllowance becomes debt, at most
// half the gap. The cap keeps a loop that is slow for long (ticks 500 ms
// apart, minute after minute) from stopping its clock, which would stretch
// every timeout, a real peer's failure's included, without bound: the
// clock runs at least half as fast as the wall, so a starved node blames
// its peers for at most half of its lateness and its timeouts take at most
// twice as long.
func (c *loopClock) tick(wall time.Time) time.Time {
	if !c.prevTick.IsZero() {
		gap := wall.Sub(c.prevTick)
		if late := gap - lateAllowance; late > 0 {
			ex := min(late, gap/2)
			c.starved += late - ex
			c.debt += ex
			c.totalLate.Store(int64(c.debt))
			c.lateTicks.Add(1)
			if int64(ex) > c.maxLate.Load() {
				c.maxLate.Store(int64(ex))
			}
		}
	}
	c.prevTick = wall
	return c.now(wall)
}

// takeStarved returns the lateness the cap kept in the clock since the
// last call. The clock blames peers for it (their heartbeats, their loads'
// timeouts), but the data-path deadlines (the progress watchdog, domain's
// probes) must not: they are short (1 s, 250 ms) and a starved process
// would close healthy sessions for them (loads.Table.Starved). A real
// stall is still caught, the watchdog's clock then advancing by
// lateAllowance per tick at least, and the load timeout bounds it anyway.
func (c *loopClock) takeStarved() time.Duration {
	d := c.starved
	c.starved = 0
	return d
}

// LoopLateness is how late the node's loop ran: the longest stretch and
// the total time, beyond a tick and some jitter, during which it took no
// tick, and how many times. The node excluded that time from every
// timeout it judged (see loopClock); a large figure means the machine (or
// the engine's calls) starved the node.
type LoopLateness struct {
	Max, Total time.Duration
	Count      int64
}

// LoopLateness reports the loop's lateness so far; safe from any goroutine.
func (n *Node) LoopLateness() LoopLateness {
	return LoopLateness{
		Max:   time.Duration(n.clk.maxLate.Load()),
		Total: time.Duration(n.clk.totalLate.Load()),
		Count: n.clk.lateTicks.Load(),
	}
}
