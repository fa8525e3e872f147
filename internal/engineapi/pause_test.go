package engineapi

import (
	"testing"
	"time"
)

func TestPauseGuard(t *testing.T) {
	t0 := time.Unix(1000, 0)
	g := pauseGuard{every: 250 * time.Millisecond}
	steps := []struct {
		at     time.Duration
		paused bool
	}{
		{0, false},                                     // the first wake-up has nothing to compare with
		{250 * time.Millisecond, false},                // a tick on time
		{750 * time.Millisecond, false},                // two intervals late is still running
		{751*time.Millisecond + 3*time.Second, true},   // stopped for 3 s
		{1001*time.Millisecond + 3*time.Second, false}, // running again
		{1001*time.Millisecond + 3*time.Second, false}, // two events at one instant
	}
	for i, s := range steps {
		if got := g.woke(t0.Add(s.at)); got != s.paused {
			t.Errorf("step %d (at %v): paused %v, want %v", i, s.at, got, s.paused)
		}
	}
}
