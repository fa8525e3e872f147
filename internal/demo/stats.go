package demo

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/kvp2p/kvp2p/internal/bench"
	"github.com/kvp2p/kvp2p/internal/report"
	"github.com/kvp2p/kvp2p/internal/scenario"
)

// What the demo measures besides docs/design.md §7's report: how long hits
// took, whether its own step loop kept time (when it did not, the machine
// or the harness is the limit, not the nodes), and how the blocks of the
// loads reported OK read back.

// Result is one run's records and report, and the harness's figures.
type Result struct {
	report.Run
	stats demoStats
}

// demoStats are a run's harness figures.
type demoStats struct {
	late []time.Duration // per step: how long after its due time it started
	// took is how long each step took: its Manager calls wait for the
	// nodes' loops, so a congested node holds every engine (and the
	// lateness of the next step does not show it: the loop does not
	// catch up in a burst).
	took  []time.Duration
	check readBack
	// cpuWait is the share of the run during which some task on the
	// machine waited for a CPU (cpuWaitOK: the kernel said).
	cpuWait   float64
	cpuWaitOK bool
	// sched99 and schedMax: how long the process's goroutines waited to
	// run, runnable (schedOK: the runtime said; sched.go).
	sched99, schedMax time.Duration
	schedOK           bool
	// nodeLateMax is the longest a live node's loop went without a tick
	// beyond its allowance (node.Node.LoopLateness), over the fleet.
	nodeLateMax time.Duration
	// overBudget counts loads failed early because their producer had them
	// queued behind others for load_start_budget (overload, not a fault:
	// the engine prefilled; the report counts them as fallbacks).
	overBudget int
	// failed counts the failed loads by reason: what a fallback after a
	// hit was for.
	failed map[string]int
	// faultMax is the longest the step loop spent applying one timeline
	// entry (a crash closes a node and waits for it), and faultMaxWhat
	// which: the engines do not step meanwhile.
	faultMax     time.Duration
	faultMaxWhat string
}

// faultTook records how long applying ft held the step loop.
func (s *demoStats) faultTook(ft scenario.Fault, d time.Duration) {
	if d > s.faultMax {
		s.faultMax, s.faultMaxWhat = d, fmt.Sprintf("%s %s at %v", ft.Kind, ft.Target, ft.At)
	}
}

// readBack counts the blocks of OK loads by what reading them back found.
// Wrong and Vanished are corrupt loads: a Missing block was evicted from
// the consumer's store (its slot reused by a later load or put) before the
// harness read it, which an engine, that reads a load into its own
// memory when it completes, never sees; a Vanished one is gone although
// the store evicted nothing (evict.go).
type readBack struct {
	intact, missing, wrong, vanished int
}

// blockCheck is what reading one block back found.
type blockCheck uint8

const (
	blockIntact   blockCheck = iota // present, the bytes written
	blockMissing                    // no longer in the store
	blockWrong                      // present, other bytes
	blockVanished                   // no longer in the store, and not evicted
)

// add counts one read-back.
func (rb *readBack) add(c blockCheck) {
	switch c {
	case blockIntact:
		rb.intact++
	case blockMissing:
		rb.missing++
	case blockVanished:
		rb.vanished++
	default:
		rb.wrong++
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// timeToHit is, for every hit, the time from its arrival to its
// resolution.
func timeToHit(reqs []report.Request) []time.Duration {
	var out []time.Duration
	for _, r := range reqs {
		if r.Outcome == report.Hit {
			out = append(out, r.Resolved-r.Arrived)
		}
	}
	return out
}

// PrintStats prints a line per run: time to hit, the step loop's
// lateness, and the read-back of loaded blocks.
func PrintStats(w io.Writer, rs []Result) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "time to hit (arrival to loaded); the machine: the harness's step loop lateness (how long after")
	fmt.Fprintln(w, "its due time a 5 ms step started) and how long a step took (its calls wait for the nodes' loops),")
	fmt.Fprintln(w, "the nodes' loops' lateness (longest stretch without a tick, excluded from their timeouts), cpu")
	fmt.Fprintln(w, "wait (share of the run some task waited for a CPU, /proc/pressure/cpu; near 100% the machine, not")
	fmt.Fprintln(w, "the nodes, is the limit) and how long goroutines waited to run; the read-back of every block of")
	fmt.Fprintln(w, "every load reported OK (missing: evicted before it was read; wrong, vanished: corrupt); loads failed early")
	fmt.Fprintln(w, "for queueing past load_start_budget; the longest the driver spent applying one fault:")
	for _, r := range rs {
		t50, t99, tmx := bench.Quantiles(timeToHit(r.Requests))
		l50, l99, lmx := bench.Quantiles(r.stats.late)
		_, k99, kmx := bench.Quantiles(r.stats.took)
		c := r.stats.check
		wait := "n/a"
		if r.stats.cpuWaitOK {
			wait = fmt.Sprintf("%.0f%%", 100*r.stats.cpuWait)
		}
		fmt.Fprintf(w, "  %-18s %-10s tth p50 %s p99 %s max %s ms | step late p50 %s p99 %s max %s ms, took p99 %s max %s ms, node loop late max %s ms, cpu wait %s | blocks intact %d missing %d wrong %d vanished %d | over budget %d\n",
			r.Report.Scenario, r.Policy, bench.FormatMs(t50), bench.FormatMs(t99), bench.FormatMs(tmx), bench.FormatMs(l50), bench.FormatMs(l99), bench.FormatMs(lmx), bench.FormatMs(k99), bench.FormatMs(kmx), bench.FormatMs(ms(r.stats.nodeLateMax)), wait,
			c.intact, c.missing, c.wrong, c.vanished, r.stats.overBudget)
		if r.stats.schedOK {
			fmt.Fprintf(w, "  %-18s %-10s goroutines waited to run: p99 %s max %s ms (the whole process)\n", "", r.Policy,
				bench.FormatMs(ms(r.stats.sched99)), bench.FormatMs(ms(r.stats.schedMax)))
		}
		if r.stats.faultMaxWhat != "" {
			fmt.Fprintf(w, "  %-18s %-10s longest fault applied: %s, %s ms\n", "", r.Policy, r.stats.faultMaxWhat, bench.FormatMs(ms(r.stats.faultMax)))
		}
		if len(r.stats.failed) > 0 {
			reasons := slices.Sorted(maps.Keys(r.stats.failed))
			var parts []string
			for _, k := range reasons {
				parts = append(parts, fmt.Sprintf("%s: %d", k, r.stats.failed[k]))
			}
			fmt.Fprintf(w, "  %-18s %-10s failed loads by reason: %s\n", "", r.Policy, strings.Join(parts, ", "))
		}
	}
}
