package metrics

import (
	"fmt"
	"math"
)

// LatencyBuckets are the upper bounds, in seconds, of every latency
// histogram. They resolve 1 ms to 60 s, finer where the policies' own
// times fall, so a quantile read off them says which mechanism acted: a
// probe (250 ms), a connect wait plus a probe (500 ms, the domain policy's
// fallback), the stall watchdog (1 s), vLLM's load timeouts (10 s, 30 s).
func LatencyBuckets() []float64 {
	return []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.3, 0.5, 0.6, 0.75, 1, 1.5,
		2.5, 5, 10, 15, 30, 45, 60}
}

// BlockBuckets are the upper bounds of the blocks-per-transfer histogram.
func BlockBuckets() []float64 {
	return []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}
}

// Hist is a fixed-bucket histogram for one goroutine (the node's loop):
// no atomics, no locks. The zero value is unusable; use NewHist.
type Hist struct {
	Bounds []float64 `json:"bounds"` // upper bounds, ascending
	Counts []uint64  `json:"counts"` // Counts[i]: observations <= Bounds[i] and > Bounds[i-1]; the last is +Inf
	Sum    float64   `json:"sum"`
	Count  uint64    `json:"count"`
}

// NewHist returns an empty histogram over bounds (ascending).
func NewHist(bounds []float64) Hist {
	return Hist{Bounds: bounds, Counts: make([]uint64, len(bounds)+1)}
}

// Observe adds v. NaN is dropped: it would poison Sum.
func (h *Hist) Observe(v float64) {
	if math.IsNaN(v) || len(h.Counts) != len(h.Bounds)+1 {
		return
	}
	i := 0
	for i < len(h.Bounds) && v > h.Bounds[i] {
		i++
	}
	h.Counts[i]++
	h.Sum += v
	h.Count++
}

// Valid reports whether h is well formed: one count per bound plus +Inf,
// bounds ascending. A decoded histogram must be checked before use.
func (h Hist) Valid() bool {
	if len(h.Counts) != len(h.Bounds)+1 {
		return false
	}
	for i := 1; i < len(h.Bounds); i++ {
		if !(h.Bounds[i] > h.Bounds[i-1]) {
			return false
		}
	}
	return true
}

// Clone returns a copy that shares nothing with h.
func (h Hist) Clone() Hist {
	return Hist{Bounds: h.Bounds, Counts: append([]uint64(nil), h.Counts...), Sum: h.Sum, Count: h.Count}
}

// Cumulative returns Prometheus's view: bound -> observations <= bound.
func (h Hist) Cumulative() map[float64]uint64 {
	out := make(map[float64]uint64, len(h.Bounds))
	var n uint64
	for i, b := range h.Bounds {
		if i < len(h.Counts) {
			n += h.Counts[i]
		}
		out[b] = n
	}
	return out
}

// Quantile estimates the q-quantile (0..1) by linear interpolation inside
// its bucket, as Prometheus's histogram_quantile does; 0 when empty.
func (h Hist) Quantile(q float64) float64 {
	if h.Count == 0 || len(h.Counts) != len(h.Bounds)+1 {
		return 0
	}
	rank := q * float64(h.Count)
	var seen float64
	for i, c := range h.Counts {
		if c == 0 || seen+float64(c) < rank {
			seen += float64(c)
			continue
		}
		if i == len(h.Bounds) {
			return h.Bounds[len(h.Bounds)-1] // beyond the last bound: its bound is all we know
		}
		lo := 0.0
		if i > 0 {
			lo = h.Bounds[i-1]
		}
		return lo + (h.Bounds[i]-lo)*(rank-seen)/float64(c)
	}
	return h.Bounds[len(h.Bounds)-1]
}

// BucketLabel names bucket i for people: "≤ 250ms", "> 60s".
func (h Hist) BucketLabel(i int) string {
	if len(h.Bounds) == 0 || i < 0 {
		return ""
	}
	if i >= len(h.Bounds) {
		return "> " + seconds(h.Bounds[len(h.Bounds)-1])
	}
	return "≤ " + seconds(h.Bounds[i])
}

func seconds(s float64) string {
	if s < 1 {
		return fmt.Sprintf("%gms", s*1000)
	}
	return fmt.Sprintf("%gs", s)
}
