package node

import (
	"testing"
	"time"
)

// TestLoopClockExcludesLateness: a stretch without ticks beyond the
// allowance is excluded from the clock the decisions see, so a peer is not
// timed out for the loop's own lateness; regular ticks are not; readings
// never go back.
func TestLoopClockExcludesLateness(t *testing.T) {
	var c loopClock
	t0 := time.Unix(1000, 0)
	if got := c.tick(t0); !got.Equal(t0) {
		t.Fatalf("first tick: %v, want %v", got, t0)
	}
	w := t0
	for range 100 { // a second of regular ticks: no lateness
		w = w.Add(tickEvery)
		if got := c.tick(w); !got.Equal(w) {
			t.Fatalf("regular tick at %v read %v", w, got)
		}
	}
	// The loop is starved for 2 s: the next tick comes 2 s after the last.
	starved := w.Add(2 * time.Second)
	got := c.tick(starved)
	want := starved.Add(-time.Second) // half the gap: the cap
	if !got.Equal(want) {
		t.Fatalf("after a 2 s stall the clock reads %v, want %v (only the allowance counted)", got.Sub(t0), want.Sub(t0))
	}
	if l := c.debt; l != time.Second {
		t.Fatalf("debt %v", l)
	}
	// Events after it are stamped on the same clock.
	if got := c.now(starved.Add(5 * time.Millisecond)); !got.Equal(want.Add(5 * time.Millisecond)) {
		t.Fatalf("now after the stall: %v", got.Sub(t0))
	}
	// A wall reading from before the last one (events racing the tick)
	// does not take the clock back.
	if got := c.now(starved.Add(-time.Second)); got.Before(want.Add(5 * time.Millisecond)) {
		t.Fatalf("clock went back to %v", got.Sub(t0))
	}
	if c.maxLate.Load() != int64(time.Second) || c.lateTicks.Load() != 1 {
		t.Fatalf("lateness max %v count %d", time.Duration(c.maxLate.Load()), c.lateTicks.Load())
	}
	// A gap just over the allowance: all of the excess is excluded.
	last := c.now(starved.Add(5 * time.Millisecond))
	w = starved.Add(5 * time.Millisecond)
	c.tick(w)
	w2 := w.Add(lateAllowance + 20*time.Millisecond)
	if got := c.tick(w2); !got.Equal(last.Add(lateAllowance)) {
		t.Fatalf("short lateness: clock advanced %v, want %v", got.Sub(last), lateAllowance)
	}
}

// TestLoopClockSustainedSlowness: a loop whose ticks come 500 ms apart for
// a minute keeps a clock running at least half as fast as the wall, so its
// timeouts take at most twice as long.
func TestLoopClockSustainedSlowness(t *testing.T) {
	var c loopClock
	t0 := time.Unix(1000, 0)
	c.tick(t0)
	w := t0
	for range 120 {
		w = w.Add(500 * time.Millisecond)
		c.tick(w)
	}
	if got := c.now(w).Sub(t0); got < 30*time.Second {
		t.Fatalf("after 60 s of slow ticks the clock advanced %v, want at least 30 s", got)
	}
}

// TestLoopClockStarved: the lateness the cap leaves in the clock is handed
// to the data-path deadlines once (takeStarved), so that a tick after a
// starved stretch blames nothing of it on the peers' data paths; a short
// lateness, wholly excluded from the clock, leaves nothing to hand over.
func TestLoopClockStarved(t *testing.T) {
	var c loopClock
	w := time.Unix(1000, 0)
	c.tick(w)
	w = w.Add(lateAllowance + 20*time.Millisecond)
	c.tick(w)
	if d := c.takeStarved(); d != 0 {
		t.Fatalf("short lateness handed over %v", d)
	}
	before := c.now(w)
	w = w.Add(2 * time.Second)
	got := c.tick(w)
	// The clock excluded half the gap; the rest of the lateness is handed
	// over, so the data-path deadlines advance by lateAllowance only.
	if d := c.takeStarved(); d != time.Second-lateAllowance {
		t.Fatalf("handed over %v, want %v", d, time.Second-lateAllowance)
	} else if adv := got.Sub(before) - d; adv != lateAllowance {
		t.Fatalf("data-path clock advanced %v over a 2 s starvation, want %v", adv, lateAllowance)
	}
	if d := c.takeStarved(); d != 0 {
		t.Fatalf("handed over twice: %v", d)
	}
}
