package sim

import (
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/report"
	"github.com/kvp2p/kvp2p/internal/scenario"
)

// TestDeterministic: the same (scenario, policy, seed) gives the same
// records and the same number of events; another seed gives other ones.
func TestDeterministic(t *testing.T) {
	sc := load(t, "pod-partial")
	for _, p := range health.Names() {
		a, b := run(t, sc, p, 0), run(t, sc, p, 0)
		if !reflect.DeepEqual(a.Requests, b.Requests) || a.Events != b.Events || a.Report != b.Report {
			t.Fatalf("%s: two runs with one seed differ: %d vs %d events\n%+v\n%+v", p, a.Events, b.Events, a.Report, b.Report)
		}
		if c := run(t, sc, p, 2); reflect.DeepEqual(a.Requests, c.Requests) {
			t.Fatalf("%s: seeds 1 and 2 gave the same run", p)
		}
	}
}

// TestWorkersSameRun: ticking a large fleet on several goroutines gives
// the very same run as on one.
func TestWorkersSameRun(t *testing.T) {
	sc := scaleScenario(12, 4, 10)
	sc.Duration, sc.Workload.Stop = 5*time.Second, 4*time.Second
	sc.Faults[0].At = 2 * time.Second
	var res [2]Result
	for i, w := range []int{1, 2} {
		o := scaleOptions("domain")
		o.Workers = w
		r, err := Run(sc, "domain", o)
		if err != nil {
			t.Fatal(err)
		}
		res[i] = r
	}
	if !reflect.DeepEqual(res[0].Requests, res[1].Requests) || res[0].Events != res[1].Events || res[0].Report.Hits == 0 {
		t.Fatalf("1 and 2 workers differ: %+v\n%+v", res[0].Report, res[1].Report)
	}
}

func load(t *testing.T, name string) *scenario.Scenario {
	t.Helper()
	if !slices.Contains(scenario.Builtins(), name) {
		t.Skipf("built-in scenario %s not there yet", name)
	}
	sc, err := scenario.Load(name)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func run(t *testing.T, sc *scenario.Scenario, policy string, seed int64) Result {
	t.Helper()
	res, err := Run(sc, policy, Options{Seed: seed, checkTimers: true, checkSkips: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.timerErr != nil {
		t.Fatalf("timer queues: %v", res.timerErr)
	}
	if res.skipErr != nil {
		t.Fatalf("skipped ticks: %v", res.skipErr)
	}
	return res
}

// runs caches one run per (scenario, policy) for the regression tests.
var runs struct {
	sync.Mutex
	m map[[2]string]*Result
}

func cached(t *testing.T, name, policy string) Result {
	t.Helper()
	sc := load(t, name)
	runs.Lock()
	defer runs.Unlock()
	if runs.m == nil {
		runs.m = map[[2]string]*Result{}
	}
	k := [2]string{name, policy}
	if r := runs.m[k]; r != nil {
		return *r
	}
	r := run(t, sc, policy, 0)
	runs.m[k] = &r
	return r
}

// target is one pinned property of a built-in scenario under a policy.
// check gets the policy's report and the scenario's reports by policy.
type target struct {
	scenario, policy string
	what             string
	check            func(r report.Report, by map[string]report.Report) bool
}

// targets pins the targets for per-peer and host-group, and what
// each scenario file promises for them; domainTargets adds the domain
// policy's on every built-in.
var targets = append(domainTargets(), []target{
	{"pod-partial", health.PerPeer, "ranks 1-7 wait out their load timeout: ttf max >= 9 s",
		func(r report.Report, _ map[string]report.Report) bool { return r.TTFms.Max >= 9000 }},
	// vLLM #64251: the first load to time out faults its session, and the
	// session's other loads fail with it: none is left waiting.
	{"pod-partial", health.PerPeer, "#64251 fails the rest of a stalled session's loads: nothing stuck",
		func(r report.Report, _ map[string]report.Report) bool { return r.Stuck == 0 && r.Censored == 0 }},
	{"slow-sibling", health.PerPeer, "no false fallbacks",
		func(r report.Report, _ map[string]report.Report) bool { return r.FalseFallbacks == 0 }},
	{"slow-sibling", health.HostGroup, "false fallbacks",
		func(r report.Report, _ map[string]report.Report) bool { return r.FalseFallbacks > 0 }},
	// Issue 8: this target used to say p99 < 1 s, an artifact of a run that
	// stopped before the later loads to ranks 1-7 timed out (they were
	// counted stuck, not slow). What PR #64678 does: the reap fails the
	// loads in flight at once, but once the 10 s quarantine ends new
	// sessions to ranks 1-7, whose data path is still dead, wait out the
	// 30 s PD load timeout.
	//
	// Issue 24: with the blackhole held as TCP holds it (hold.go), the loads
	// of those new sessions no longer time out: their frames are held and
	// arrive at the first retransmission after the heal, seconds late.
	{"pod-partial", health.HostGroup, "rank 0's reap fails ranks 1-7's loads at once (ttf p50 < 1 s); after the quarantine their loads wait for the heal (tth p99 >= 1 s); nothing stuck",
		func(r report.Report, _ map[string]report.Report) bool {
			return r.TTFms.P50 < 1000 && r.TTHms.P99 >= 1000 && r.Stuck == 0
		}},
	{"pod-partial", health.HostGroup, "src-b is taken down too: false fallbacks",
		func(r report.Report, _ map[string]report.Report) bool { return r.FalseFallbacks > 0 }},
	{"colocated", health.HostGroup, "false fallbacks",
		func(r report.Report, _ map[string]report.Report) bool { return r.FalseFallbacks > 0 }},
	{"colocated", health.PerPeer, "no false fallbacks",
		func(r report.Report, _ map[string]report.Report) bool { return r.FalseFallbacks == 0 }},
	{"idle-eviction", health.HostGroup, "false fallbacks, more than per-peer's",
		func(r report.Report, by map[string]report.Report) bool {
			return r.FalseFallbacks > 0 && r.FalseFallbacks > by[health.PerPeer].FalseFallbacks
		}},
	{"idle-eviction", health.PerPeer, "nothing affected",
		func(r report.Report, _ map[string]report.Report) bool { return r.Affected == 0 }},
	{"handshake-fail", health.HostGroup, "false fallbacks",
		func(r report.Report, _ map[string]report.Report) bool { return r.FalseFallbacks > 0 }},
	{"rank-crash", health.PerPeer, "reset seen at once: no false fallbacks, ttf max < 100 ms",
		func(r report.Report, _ map[string]report.Report) bool {
			return r.FalseFallbacks == 0 && r.TTFms.Max < 100 && r.Fallbacks > 0
		}},
	{"rank-crash", health.HostGroup, "false fallbacks",
		func(r report.Report, _ map[string]report.Report) bool { return r.FalseFallbacks > 0 }},
	{"pod-crash", health.PerPeer, "no false fallbacks",
		func(r report.Report, _ map[string]report.Report) bool { return r.FalseFallbacks == 0 }},
	{"data-stall", health.PerPeer, "no watchdog: ttf p99 >= 9 s",
		func(r report.Report, _ map[string]report.Report) bool { return r.TTFms.P99 >= 9000 }},
	// Issue 24 (the blackhole held as TCP holds it, hold.go): a load caught
	// in a silent spell no longer waits out the 30 s load timeout; it
	// resumes at a retransmission after a heal, or its connection is
	// aborted by TCP_USER_TIMEOUT (vLLM's 10 s heartbeat timeout) when
	// every retransmission falls in a spell. The fault lab measured ttf
	// p50 6.6 s, p99 10.6 s (README, fault lab).
	{"flapping", health.PerPeer, "loads caught in a silent spell wait for a retransmission or the TCP user timeout: ttf p50 >= 3 s",
		func(r report.Report, _ map[string]report.Report) bool { return r.TTFms.P50 >= 3000 }},
	{"slow-peer", health.PerPeer, "slow is not a fault: no fallbacks",
		func(r report.Report, _ map[string]report.Report) bool { return r.Fallbacks == 0 }},
	{"slow-peer", health.HostGroup, "slow is not a fault: no fallbacks",
		func(r report.Report, _ map[string]report.Report) bool { return r.Fallbacks == 0 }},
}...)

func TestScenarioTargets(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.scenario+"/"+tg.policy+"/"+tg.what, func(t *testing.T) {
			by := map[string]report.Report{}
			for _, p := range health.Names() {
				by[p] = cached(t, tg.scenario, p).Report
			}
			if r := by[tg.policy]; !tg.check(r, by) {
				t.Fatalf("%s under %s: want %s; got %+v", tg.scenario, tg.policy, tg.what, r)
			}
		})
	}
}

// TestScenarioInvariants: under every policy and built-in scenario the
// simulator itself stays sound: every load it reported OK carried the
// right bytes, every table drains, and (per-peer, host-group) no slot
// leaks.
func TestScenarioInvariants(t *testing.T) {
	for _, name := range scenario.Builtins() {
		for _, p := range health.Names() {
			t.Run(name+"/"+p, func(t *testing.T) {
				res := cached(t, name, p)
				r := res.Report
				if r.Requests == 0 || r.Hits == 0 {
					t.Fatalf("no traffic: %+v", r)
				}
				if r.CorruptLoads != 0 || !res.Drained {
					t.Fatalf("corrupt %d, drained %v", r.CorruptLoads, res.Drained)
				}
				if r.LeakedSlots != 0 {
					t.Fatalf("%d slots leaked", r.LeakedSlots)
				}
				if r.Hits+r.Fallbacks+r.Stuck != r.Requests {
					t.Fatalf("outcomes do not add up: %+v", r)
				}
			})
		}
	}
}
