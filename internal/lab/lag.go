package lab

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/kvp2p/kvp2p/internal/report"
	"github.com/kvp2p/kvp2p/internal/scenario"
)

// The driver's own share of a figure: every time-to-fallback the lab
// reports is arrival to the step at which the driver saw the fallback, so
// a driver step that ran long (its engine calls to the sidecars waiting
// for a starved machine) adds to it. The lab records how long its steps
// took and the machine's load average around each run, so that a tail
// can be told apart from the node's decisions.

// stepLog records the driver's step durations.
type stepLog struct {
	d         []time.Duration
	wl, polls time.Duration // time in the workload's steps, in the sources' polls
}

func (s *stepLog) add(d time.Duration) { s.d = append(s.d, d) }

// summary is "p50/p99/max ms, N over 100 ms", or "" with no steps.
func (s *stepLog) summary() string {
	if len(s.d) == 0 {
		return ""
	}
	d := slices.Clone(s.d)
	slices.Sort(d)
	q := func(p float64) float64 {
		return float64(d[min(len(d)-1, int(p*float64(len(d))))]) / float64(time.Millisecond)
	}
	over := 0
	for _, x := range d {
		if x > 100*time.Millisecond {
			over++
		}
	}
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return fmt.Sprintf("driver steps p50 %.1f ms, p99 %.1f ms, max %.0f ms, %d of %d over 100 ms (busy %.1f s: workload %.1f s, source polls %.1f s)",
		q(0.5), q(0.99), q(1), over, len(d), sum.Seconds(), s.wl.Seconds(), s.polls.Seconds())
}

// loadAvg is /proc/loadavg's first three fields, or "?" if it cannot be
// read.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// issueLag summarises how late the driver handed requests to their
// consumers' sidecars, after their arrival, and what the report's ttf
// would be measured from that hand-over instead (the same definition,
// report.Compute's, with each request's arrival moved to its issue):
// what kvp2p took, without the driver's lateness.
func issueLag(sc *scenario.Scenario, policy string, reqs []report.Request, issued map[string]time.Duration) string {
	var lag []time.Duration
	adj := slices.Clone(reqs)
	for i, q := range adj {
		at, ok := issued[q.ID]
		if !ok {
			continue
		}
		lag = append(lag, at-q.Arrived)
		adj[i].Arrived = max(at, q.Arrived)
	}
	if len(lag) == 0 {
		return "no request issued"
	}
	slices.Sort(lag)
	ms := func(p float64) float64 {
		return float64(lag[min(len(lag)-1, int(p*float64(len(lag))))]) / float64(time.Millisecond)
	}
	t := report.Compute(sc, policy, adj, 0).TTFms
	return fmt.Sprintf("requests issued after their arrival by p50/p99/max %.1f/%.1f/%.0f ms; ttf from their issue p50/p99/max %.1f/%.1f/%.1f ms",
		ms(0.5), ms(0.99), ms(1), t.P50, t.P99, t.Max)
}
