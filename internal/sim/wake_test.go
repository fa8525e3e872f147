package sim

import (
	"reflect"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/scenario"
)

// TestSkippedTicksSameRun: ticking each node only at its table's deadlines
// gives the very run that ticking it at every grid point gives (the
// simulator before deadlines), for every built-in scenario, policy and
// timer set, with fewer ticks; and no node was skipped with something due
// (CheckSkips, which also checks the runner's slot counts against a walk
// over every node). Under -race (which adds nothing to one goroutine's
// determinism) it runs a few scenarios that stall, blackhole, restart and
// evict; `go test ./internal/sim` runs them all.
func TestSkippedTicksSameRun(t *testing.T) {
	names := scenario.Builtins()
	if testing.Short() || raceEnabled {
		names = []string{"data-stall", "host-blackhole", "idle-eviction", "restart"}
	}
	for _, name := range names {
		sc := load(t, name)
		for _, p := range health.Names() {
			for _, set := range []string{TimersVLLM, TimersKVP2P} { // the preset is one of them {
				skip := runWith(t, sc, p, Options{TimerSet: set, checkSkips: true})
				every := runWith(t, sc, p, Options{TimerSet: set, tickEvery: true})
				if !reflect.DeepEqual(skip.Requests, every.Requests) || skip.Report != every.Report ||
					skip.Events != every.Events || skip.Peak != every.Peak || skip.Orphans != every.Orphans {
					t.Fatalf("%s/%s/%q: skipping ticks changed the run: %d vs %d events\n%+v\n%+v",
						name, p, set, skip.Events, every.Events, skip.Report, every.Report)
				}
				if skip.Ticks >= every.Ticks {
					t.Errorf("%s/%s/%q: %d ticks skipping, %d ticking every node", name, p, set, skip.Ticks, every.Ticks)
				}
			}
		}
	}
}

// TestSkippedTicksScaleSameRun: the same on a fleet of idle sources, where
// the skipping is what makes it cheap.
func TestSkippedTicksScaleSameRun(t *testing.T) {
	sc := scaleScenario(12, 4, 10)
	sc.Duration, sc.Workload.Stop = 5*time.Second, 4*time.Second
	sc.Faults[0].At = 2 * time.Second
	o := scaleOptions("domain")
	o.checkSkips = true
	skip := runWith(t, sc, "domain", o)
	o.checkSkips, o.tickEvery = false, true
	every := runWith(t, sc, "domain", o)
	if !reflect.DeepEqual(skip.Requests, every.Requests) || skip.Events != every.Events || skip.Report.Hits == 0 {
		t.Fatalf("skipping ticks changed the run: %+v\n%+v", skip.Report, every.Report)
	}
	if 2*skip.Ticks > every.Ticks {
		t.Errorf("%d ticks skipping, %d ticking every node: want at most half", skip.Ticks, every.Ticks)
	}
}

// TestCheckSkipsFinds: the check itself fails when a due node is left out
// (a deadline-bearing table the wake heap never heard of).
func TestCheckSkipsFinds(t *testing.T) {
	n := NewNet(t0)
	n.CheckSkips = true
	a, err := n.NewNode("a:1", NodeOpts{Policy: "domain"})
	if err != nil {
		t.Fatal(err)
	}
	// The domain policy's first prune is due at once, so a's table has a
	// deadline; forget that anything touched it (advance, unlike Advance,
	// flushes nothing first).
	n.dirty, a.isDirty = nil, false
	n.advance(n.Tick)
	if n.SkipError() == nil {
		t.Fatal("a node skipped with a deadline due went unnoticed")
	}
}

func runWith(t *testing.T, sc *scenario.Scenario, policy string, o Options) Result {
	t.Helper()
	res, err := Run(sc, policy, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.skipErr != nil {
		t.Fatalf("%s/%s: %v", sc.Name, policy, res.skipErr)
	}
	return res
}
