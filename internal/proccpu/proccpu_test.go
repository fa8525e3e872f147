package proccpu

import (
	"runtime"
	"testing"
	"time"
)

// TestUsedGrowsWithWork: spinning for a while shows up as CPU time, and
// the counter never goes back.
func TestUsedGrowsWithWork(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "js" || runtime.GOOS == "wasip1" {
		t.Skip("no getrusage")
	}
	a, ok := Used()
	if !ok {
		t.Fatal("Used: not available on a unix")
	}
	x := uint64(1)
	// Bounded by the wall clock, so that a counter that never moves fails
	// instead of hanging.
	for b, end := usedOr0(), time.Now().Add(5*time.Second); b-a < 20*time.Millisecond && time.Now().Before(end); b, _ = Used() {
		for range 1 << 16 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	b, _ := Used()
	if b < a+20*time.Millisecond {
		t.Fatalf("Used went from %v to %v", a, b)
	}
	if x == 0 {
		t.Log(x) // keep the loop
	}
}

func usedOr0() time.Duration {
	d, _ := Used()
	return d
}
