package loads_test

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/sim"
)

// recorder is an Observer that writes down what it hears.
type recorder struct{ b strings.Builder }

func (r *recorder) JobSettled(res loads.JobResult, submitted time.Time) {
	fmt.Fprintf(&r.b, "settled %+v %v\n", res, submitted)
}

func (r *recorder) LookupFellBack(id string, waited time.Duration) {
	fmt.Fprintf(&r.b, "fell back %s %v\n", id, waited)
}

func (r *recorder) LookupPendingIgnored() { r.b.WriteString("pending ignored\n") }

// logLine is a log line's level, message and node: its wall-clock time
// differs from run to run, and so, where the table logs one of several
// jobs due at once, do its other attributes (even between two runs with
// Lookup per key).
var logLine = regexp.MustCompile(`(level=\S+ msg=("[^"]*"|\S+)).* (node=\S+)`)

func logGist(s string) string {
	var b strings.Builder
	for _, m := range logLine.FindAllStringSubmatch(s, -1) {
		b.WriteString(m[1] + " " + m[3] + "\n")
	}
	return sortedLines(b.String())
}

// TestLookupBatchIsLookups runs the random property workload twice per
// seed and policy, once looking a request's keys up with a Lookup per key
// and once with one LookupBatch, and requires the same of both: every
// verdict, every job result on every node, what the observer heard and
// everything the nodes logged (sessions, policy decisions, probes,
// reaps). LookupBatch is an optimisation: it must change nothing.
func TestLookupBatchIsLookups(t *testing.T) {
	seeds := 8
	if testing.Short() {
		seeds = 2
	}
	var verdicts, lookups [3]int // by Hit, Miss, Retry; of them in batches of 2+ keys
	for _, cfg := range propConfigs() {
		for seed := 1; seed <= seeds; seed++ {
			t.Run(fmt.Sprintf("%s/seed=%d", cfg.name, seed), func(t *testing.T) {
				type run struct {
					pr    *propRun
					trace strings.Builder
					obs   recorder
				}
				var runs [2]run
				for i := range runs {
					ru := &runs[i]
					ru.pr = runProp(t, cfg, seed, func(pr *propRun) {
						pr.batch = i == 1
						pr.trace = &ru.trace
						pr.opts.Observer = &ru.obs
					})
				}
				a, b := runs[0], runs[1]
				if a.trace.String() != b.trace.String() {
					t.Fatalf("verdicts differ:\n%s", firstDiff(a.trace.String(), b.trace.String()))
				}
				// The property workload's timers fire in map order where
				// several are due at once (two runs with Lookup per key
				// differ in order too), so what happened is compared as
				// sorted lines: the same lines, each as often.
				for i := range a.pr.nodes {
					ra, rb := sortedResults(a.pr.nodes[i].Results), sortedResults(b.pr.nodes[i].Results)
					if ra != rb {
						t.Fatalf("node %d: results differ:\n%s", i, firstDiff(ra, rb))
					}
				}
				if oa, ob := sortedLines(a.obs.b.String()), sortedLines(b.obs.b.String()); oa != ob {
					t.Fatalf("observer heard differently:\n%s", firstDiff(oa, ob))
				}
				la, lb := logGist(a.pr.f.log.String()), logGist(b.pr.f.log.String())
				if la != lb {
					t.Fatalf("logs differ:\n%s", firstDiff(la, lb))
				}
				for _, line := range strings.Split(a.trace.String(), "\n") {
					for v, s := range []string{"HIT", "MISS", "RETRY"} {
						if n := strings.Count(line, s); n > 0 {
							verdicts[v] += n
							if strings.Count(line, " ") > 2 { // more than one verdict
								lookups[v]++
							}
						}
					}
				}
			})
		}
	}
	// Not vacuous: batches of several keys answered each verdict.
	for v, s := range []string{"HIT", "MISS", "RETRY"} {
		if lookups[v] == 0 {
			t.Errorf("no batch of several keys answered %s (verdicts %v)", s, verdicts)
		}
	}
}

func sortedLines(s string) string {
	ls := strings.Split(s, "\n")
	slices.Sort(ls)
	return strings.Join(ls, "\n")
}

func sortedResults(rs []loads.JobResult) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "%+v\n", r)
	}
	return sortedLines(b.String())
}

// firstDiff shows the first line where a and b differ.
func firstDiff(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(la), len(lb)) {
		if la[i] != lb[i] {
			return fmt.Sprintf("line %d:\n  per key: %s\n  batched: %s", i+1, la[i], lb[i])
		}
	}
	return fmt.Sprintf("lengths %d and %d lines", len(la), len(lb))
}

// TestLookupBatchShapes: no keys changes nothing; a request the table does
// not know MISSes every key, as Lookup does.
func TestLookupBatchShapes(t *testing.T) {
	f := newFleet(t)
	nd := f.node("10.0.0.1:7777", sim.NodeOpts{})
	nd.T.LookupBatch(f.net.Now, "nobody", nil, nil)
	ks := nodetest.Keys("k", 3)
	out := []session.Verdict{session.Hit, session.Hit, session.Hit, session.Hit}
	nd.T.LookupBatch(f.net.Now, "nobody", ks, out)
	for i, v := range out[:3] {
		if v != session.Miss {
			t.Fatalf("key %d: %v, want MISS", i, v)
		}
	}
	if out[3] != session.Hit {
		t.Fatal("LookupBatch wrote past its keys")
	}
	if e := nd.T.TakeEffects(); !e.Empty() {
		t.Fatalf("lookups of an unknown request decided %+v", e)
	}
}
