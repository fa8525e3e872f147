package percentile

import (
	"slices"
	"testing"
)

func TestSorted(t *testing.T) {
	for _, tc := range []struct {
		v    []float64
		p    float64
		want float64
	}{
		{nil, 50, 0}, {[]float64{7}, 50, 7}, {[]float64{7}, 99, 7},
		{[]float64{1, 2}, 50, 1}, {[]float64{1, 2}, 99, 2}, {[]float64{1, 2, 3, 4}, 50, 2}, {[]float64{1, 2, 3, 4}, 100, 4},
		{[]float64{1, 2, 3, 4}, 0, 1}, {[]float64{1, 2, 3, 4}, 250, 4}, // clamped
	} {
		if got := Sorted(tc.v, tc.p); got != tc.want {
			t.Errorf("Sorted(%v, %v) = %v, want %v", tc.v, tc.p, got, tc.want)
		}
	}
}

// TestOf: the p50 and p99 of 1..100 are 50 and 99, and xs keeps its order.
func TestOf(t *testing.T) {
	var xs []float64
	for i := 100; i >= 1; i-- {
		xs = append(xs, float64(i))
	}
	orig := slices.Clone(xs)
	if p50, p99, mx := Of(xs, 50), Of(xs, 99), Of(xs, 100); p50 != 50 || p99 != 99 || mx != 100 {
		t.Errorf("Of(1..100) = %v %v %v, want 50 99 100", p50, p99, mx)
	}
	if !slices.Equal(xs, orig) {
		t.Error("Of sorted its argument")
	}
	if got := Of([]float64{3, 1, 2}, 50); got != 2 {
		t.Errorf("Of(3,1,2, 50) = %v", got)
	}
}
