package bench

import (
	"testing"
	"time"
)

// TestQuantiles: nearest rank, in milliseconds, zero when empty.
func TestQuantiles(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	if p50, p99, mx := Quantiles(ds); p50 != 50 || p99 != 99 || mx != 100 {
		t.Errorf("Quantiles(1..100 ms) = %v %v %v, want 50 99 100", p50, p99, mx)
	}
	if ds[0] != 100*time.Millisecond {
		t.Error("Quantiles sorted its argument")
	}
	if p50, p99, mx := Quantiles(nil); p50 != 0 || p99 != 0 || mx != 0 {
		t.Errorf("Quantiles(nil) = %v %v %v", p50, p99, mx)
	}
	if got := FormatMs(123.4) + " " + FormatMs(12.34); got != "123 12.3" {
		t.Errorf("FormatMs: %q", got)
	}
}
