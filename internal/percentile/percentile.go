package percentile

import (
	"math"
	"slices"
)

// Index is the index of the p-th percentile (0 < p <= 100) of n sorted
// values by the nearest-rank method: the ceil(p/100*n)-th smallest,
// clamped to the values there are. n must be positive.
func Index(n int, p float64) int {
	k := int(math.Ceil(p / 100 * float64(n)))
	return min(max(k, 1), n) - 1
}

// Sorted is the p-th percentile of sorted values; zero when there are
// none.
func Sorted(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[Index(len(sorted), p)]
}

// Of is the p-th percentile of xs, which it leaves as they are (it sorts a
// copy); zero when there are none.
func Of(xs []float64, p float64) float64 {
	return Sorted(slices.Sorted(slices.Values(xs)), p)
}
