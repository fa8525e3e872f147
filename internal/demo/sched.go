package demo

import (
	"math"
	"runtime/metrics"
	"time"
)

// schedMeter measures how long the process's goroutines waited to run
// during a run (the Go runtime's /sched/latencies histogram): on a shared
// machine a goroutine that is runnable but not running (a node's loop, a
// dial's goroutine learning it was refused) is what stretches times on
// real sockets beyond the simulator's, and this says how much. It covers
// the whole process: runs side by side share it.
type schedMeter struct {
	start []uint64
}

const schedMetric = "/sched/latencies:seconds"

func readSched() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: schedMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil // not offered by this runtime
	}
	return s[0].Value.Float64Histogram()
}

func startSched() schedMeter {
	h := readSched()
	if h == nil {
		return schedMeter{}
	}
	return schedMeter{start: append([]uint64(nil), h.Counts...)}
}

// quantiles returns the p99 and the largest scheduling latency since the
// start (each the upper bound of its histogram bucket; the last, unbounded
// bucket is reported at its lower bound), and false if the runtime does
// not offer the histogram.
func (m schedMeter) quantiles() (p99, most time.Duration, ok bool) {
	h := readSched()
	if h == nil || m.start == nil || len(h.Counts) != len(m.start) {
		return 0, 0, false
	}
	counts := make([]uint64, len(h.Counts))
	var total uint64
	for i, c := range h.Counts {
		counts[i] = c - m.start[i]
		total += counts[i]
	}
	if total == 0 {
		return 0, 0, true
	}
	bound := func(i int) time.Duration {
		b := h.Buckets[i+1]
		if math.IsInf(b, 1) {
			b = h.Buckets[i]
		}
		return time.Duration(b * float64(time.Second))
	}
	want := uint64(math.Ceil(0.99 * float64(total)))
	var seen uint64
	for i, c := range counts {
		seen += c
		if seen >= want && p99 == 0 {
			p99 = bound(i)
		}
		if c > 0 {
			most = bound(i)
		}
	}
	return p99, most, true
}
