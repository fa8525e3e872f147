// Package percentile is the one percentile function of kvp2p's reports
// and benchmarks: the nearest-rank method, which always answers one of
// the values (never an interpolation between two), so that a p99 of
// request times is the time of a request that happened.
//
// Histograms (internal/metrics.Hist, the Go runtime's scheduling
// latencies) answer from their buckets instead and are not this.
package percentile
