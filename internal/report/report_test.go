package report

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/scenario"
	"github.com/kvp2p/kvp2p/internal/scenario/scenariotest"
)

const s = time.Second

func TestWindows(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults []scenario.Fault
		want   []Window
	}{
		{"none", nil, nil},
		{"crash forever", []scenario.Fault{scenariotest.Fault(10*s, scenario.Crash, "a/1")}, []Window{{"a/1", scenario.Crash, 10 * s, -1}}},
		{"instants", []scenario.Fault{scenariotest.Fault(5*s, scenario.CloseControl, "a/0"), scenariotest.Fault(6*s, scenario.Restart, "a/2")},
			[]Window{{"a/0", scenario.CloseControl, 5 * s, 5 * s}, {"a/2", scenario.Restart, 6 * s, 6 * s}}},
		{"non-faults ignored", []scenario.Fault{scenariotest.Fault(1*s, scenario.Slow, "a/0"), scenariotest.Fault(2*s, scenario.Delay, "a/0"), scenariotest.Fault(3*s, scenario.GoodbyeIdle, "a/0"), scenariotest.Fault(4*s, scenario.Heal, "a/0")}, nil},
		{"range and star heal", []scenario.Fault{scenariotest.Fault(10*s, scenario.BlackholeData, "a/1-2"), scenariotest.Fault(25*s, scenario.Heal, "a/*")},
			[]Window{{"a/1", scenario.BlackholeData, 10 * s, 25 * s}, {"a/2", scenario.BlackholeData, 10 * s, 25 * s}}},
		{"partial heal", []scenario.Fault{scenariotest.Fault(10*s, scenario.Stall, "a/0-1"), scenariotest.Fault(12*s, scenario.Heal, "a/1")},
			[]Window{{"a/0", scenario.Stall, 10 * s, -1}, {"a/1", scenario.Stall, 10 * s, 12 * s}}},
		{"heal ends every open window", []scenario.Fault{scenariotest.Fault(1*s, scenario.Blackhole, "a/0"), scenariotest.Fault(2*s, scenario.RefuseHandshake, "a/0"), scenariotest.Fault(3*s, scenario.Heal, "a/0")},
			[]Window{{"a/0", scenario.Blackhole, 1 * s, 3 * s}, {"a/0", scenario.RefuseHandshake, 2 * s, 3 * s}}},
		{"flap", []scenario.Fault{scenariotest.Fault(1*s, scenario.BlackholeData, "a/3"), scenariotest.Fault(2*s, scenario.Heal, "a/3"), scenariotest.Fault(3*s, scenario.BlackholeData, "a/3")},
			[]Window{{"a/3", scenario.BlackholeData, 1 * s, 2 * s}, {"a/3", scenario.BlackholeData, 3 * s, -1}}},
		{"heal does not end a later fault", []scenario.Fault{scenariotest.Fault(1*s, scenario.Crash, "a/0"), scenariotest.Fault(2*s, scenario.Heal, "a/0"), scenariotest.Fault(2*s, scenario.Restart, "a/0")},
			[]Window{{"a/0", scenario.Crash, 1 * s, 2 * s}, {"a/0", scenario.Restart, 2 * s, 2 * s}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Windows(scenariotest.Fleet(tc.faults...)); !slices.Equal(got, tc.want) {
				t.Errorf("Windows =\n %v\nwant\n %v", got, tc.want)
			}
		})
	}
}

func req(src string, arrived, resolved time.Duration, o Outcome) Request {
	return Request{Source: src, Arrived: arrived, Resolved: resolved, Outcome: o}
}

func TestComputeOneRequest(t *testing.T) {
	ms := func(v float64) float64 { return v }
	blackhole := []scenario.Fault{scenariotest.Fault(10*s, scenario.BlackholeData, "a/1"), scenariotest.Fault(20*s, scenario.Heal, "a/1")}
	for _, tc := range []oneCase{
		{"hit, healthy", nil, req("a/1", 1*s, 2*s, Hit), false, false, -1},
		{"fallback, healthy: false", nil, req("a/1", 1*s, 2*s, Fallback), false, true, -1},
		{"fallback before the fault: false", blackhole, req("a/1", 5*s, 9*s, Fallback), false, true, -1},
		{"resolved exactly at the fault: affected", blackhole, req("a/1", 5*s, 10*s, Fallback), true, false, ms(0)},
		{"in flight at the fault", blackhole, req("a/1", 9*s, 12*s, Fallback), true, false, ms(2000)},
		{"arrives exactly at the fault", blackhole, req("a/1", 10*s, 10*s+250*time.Millisecond, Fallback), true, false, ms(250)},
		{"arrives during the fault: TTF from arrival", blackhole, req("a/1", 15*s, 15*s+30*time.Millisecond, Fallback), true, false, ms(30)},
		{"arrives exactly at the heal: affected", blackhole, req("a/1", 20*s, 21*s, Fallback), true, false, ms(1000)},
		{"arrives after the heal: false", blackhole, req("a/1", 20*s+1, 21*s, Fallback), false, true, -1},
		{"another rank's fault: false", blackhole, req("a/2", 12*s, 13*s, Fallback), false, true, -1},
		{"affected hit", blackhole, req("a/1", 9*s, 11*s, Hit), true, false, -1},
		{"instant inside life", []scenario.Fault{scenariotest.Fault(10*s, scenario.CloseControl, "a/1")}, req("a/1", 9*s, 10*s+5*time.Millisecond, Fallback), true, false, ms(5)},
		{"instant at arrival", []scenario.Fault{scenariotest.Fault(10*s, scenario.Restart, "a/1")}, req("a/1", 10*s, 10*s+5*time.Millisecond, Fallback), true, false, ms(5)},
		{"instant before arrival: false", []scenario.Fault{scenariotest.Fault(10*s, scenario.Restart, "a/1")}, req("a/1", 10*s+1, 11*s, Fallback), false, true, -1},
		{"instant after resolution: false", []scenario.Fault{scenariotest.Fault(10*s, scenario.CloseControl, "a/1")}, req("a/1", 9*s, 10*s-1, Fallback), false, true, -1},
		{"stuck lives to the end: censored at the end", []scenario.Fault{scenariotest.Fault(39*s, scenario.Crash, "a/1")}, req("a/1", 1*s, 0, Stuck), true, false, ms(1000)},
		{"stuck, healthy: not a ttf", nil, req("a/1", 1*s, 0, Stuck), false, false, -1},
		{"slow is not a fault", []scenario.Fault{scenariotest.Fault(1*s, scenario.Slow, "a/1"), scenariotest.Fault(9*s, scenario.Heal, "a/1")}, req("a/1", 2*s, 3*s, Fallback), false, true, -1},
		{"earliest window gives the TTF", []scenario.Fault{scenariotest.Fault(10*s, scenario.Stall, "a/1"), scenariotest.Fault(12*s, scenario.Heal, "a/1"), scenariotest.Fault(14*s, scenario.Crash, "a/1")},
			req("a/1", 8*s, 15*s, Fallback), true, false, ms(5000)},
		{"later window when the first healed before arrival", []scenario.Fault{scenariotest.Fault(10*s, scenario.Stall, "a/1"), scenariotest.Fault(12*s, scenario.Heal, "a/1"), scenariotest.Fault(14*s, scenario.Crash, "a/1")},
			req("a/1", 13*s, 15*s, Fallback), true, false, ms(1000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := scenariotest.Fleet(tc.faults...)
			rep := Compute(sc, "p", []Request{tc.r}, 0)
			checkOne(t, rep, tc.r, tc.affected, tc.falseFB, tc.ttf)
			if tc.r.Outcome == Hit {
				if d := float64(tc.r.Resolved-tc.r.Arrived) / 1e6; rep.TTHms != (TTF{P50: d, P99: d, Max: d, N: 1}) {
					t.Errorf("tth = %+v, want %v ms", rep.TTHms, d)
				}
				// Healthy: the same, but only for a hit no fault touched.
				if healthy := rep.TTHHealthyMs.N == 1; healthy == tc.affected || (healthy && rep.TTHHealthyMs != rep.TTHms) {
					t.Errorf("tth-healthy = %+v for a hit affected=%v (tth %+v)", rep.TTHHealthyMs, tc.affected, rep.TTHms)
				}
			}
		})
	}
}

func TestComputeTotals(t *testing.T) {
	sc := scenariotest.Fleet(scenariotest.Fault(10*s, scenario.Crash, "a/0"))
	var reqs []Request
	// 100 affected fallbacks with TTF 1..100 ms.
	for i := 1; i <= 100; i++ {
		reqs = append(reqs, req("a/0", 10*s, 10*s+time.Duration(i)*time.Millisecond, Fallback))
	}
	reqs = append(reqs,
		Request{Source: "a/1", Arrived: 1 * s, Resolved: 2 * s, Outcome: Hit, Bytes: 1000},
		Request{Source: "a/1", Arrived: 1 * s, Resolved: 2 * s, Outcome: Hit, Bytes: 24, Corrupt: true},
		req("a/2", 1*s, 2*s, Fallback),
		req("a/0", 11*s, 0, Stuck),
	)
	got := Compute(sc, "per-peer", reqs, 3)
	// The stuck one is censored at the end (40 s), 29 s after its arrival:
	// it is the maximum, and says it is a lower bound.
	want := Report{Scenario: "t", Policy: "per-peer", Requests: 104, Hits: 2, Fallbacks: 101, Affected: 101,
		FalseFallbacks: 1, Stuck: 1, Censored: 1,
		TTFms:        TTF{P50: 51, P99: 100, Max: 29000, N: 101, Censored: 1, MaxCensored: true},
		TTHms:        TTF{P50: 1000, P99: 1000, Max: 1000, N: 2},
		TTHHealthyMs: TTF{P50: 1000, P99: 1000, Max: 1000, N: 2}, // the stuck one was affected
		CorruptLoads: 1, LeakedSlots: 3, BytesLoaded: 1024, PeakSlots: -1, OrphanSlots: -1}
	if got != want {
		t.Errorf("Compute =\n %+v\nwant\n %+v", got, want)
	}
	if empty := Compute(sc, "x", nil, 0); empty.TTFms != (TTF{}) || empty.Requests != 0 {
		t.Errorf("empty run: %+v", empty)
	}
}

// TestComputeCensoredP99: when the stuck requests are the slowest, p99
// falls on one of them and is marked; a resolved sample equal to a
// censored one is the one a percentile takes.
func TestComputeCensoredP99(t *testing.T) {
	sc := scenariotest.Fleet(scenariotest.Fault(10*s, scenario.BlackholeData, "a/0"))
	var reqs []Request
	for i := 1; i <= 98; i++ {
		reqs = append(reqs, req("a/0", 10*s, 10*s+time.Duration(i)*time.Millisecond, Fallback))
	}
	reqs = append(reqs, req("a/0", 10*s, 0, Stuck), req("a/0", 10*s, 40*s, Fallback))
	r := Compute(sc, "p", reqs, 0)
	if r.TTFms.P99 != 30000 || r.TTFms.P99Censored || !(r.TTFms.Max == 30000 && r.TTFms.MaxCensored) {
		t.Errorf("ttf = %+v", r.TTFms)
	}
	var b bytes.Buffer
	Table(&b, []Report{r})
	if !strings.Contains(b.String(), ">=30000") {
		t.Errorf("the censored max is not marked:\n%s", b.String())
	}
}

// TestComputeCollateral: tth_domain_ms takes the hits whose source shares
// a named domain with another rank that had a fault while they were alive.
func TestComputeCollateral(t *testing.T) {
	sc := scenariotest.Fleet(scenariotest.Fault(10*s, scenario.Crash, "a/1"))
	sc.Pods[0].Domain = "pod-a"
	reqs := []Request{
		req("a/2", 9*s, 9*s+300*time.Millisecond, Hit),  // before the fault: not collateral
		req("a/2", 9*s, 10*s+400*time.Millisecond, Hit), // alive at the fault
		req("a/3", 11*s, 11*s+500*time.Millisecond, Hit),
		req("a/1", 9*s, 9*s+100*time.Millisecond, Hit), // its own fault is not collateral (and came after)
	}
	r := Compute(sc, "p", reqs, 0)
	if r.TTHDomainMs.N != 2 || r.TTHDomainMs.Max != 1400 || r.TTHms.N != 4 {
		t.Errorf("tth %+v, tth_domain %+v", r.TTHms, r.TTHDomainMs)
	}
	sc.Pods[0].Domain = ""
	if r := Compute(sc, "p", reqs, 0); r.TTHDomainMs.N != 0 {
		t.Errorf("no domain, yet collateral: %+v", r.TTHDomainMs)
	}
}

func TestReportJSON(t *testing.T) {
	b, err := Report{Scenario: "pod-partial", Policy: "domain", TTFms: TTF{P50: 1.5}}.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.ContainsRune(b, '\n') {
		t.Error("JSON spans lines")
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := []string{"affected", "bytes_loaded", "censored", "corrupt_loads", "deliberate_fallbacks", "fallbacks", "false_fallbacks", "hits",
		"leaked_slots", "orphan_slots", "peak_slots", "policy", "requests", "scenario", "stuck", "ttf_ms", "tth_domain_ms", "tth_healthy_ms", "tth_ms"}
	if !slices.Equal(keys, want) {
		t.Errorf("keys %v, want docs/design.md's %v", keys, want)
	}
	if ttf := m["ttf_ms"].(map[string]any); len(ttf) != 5 || ttf["p50"] != 1.5 {
		t.Errorf("ttf_ms = %v", ttf)
	}
}

func TestTable(t *testing.T) {
	var b bytes.Buffer
	Table(&b, []Report{
		{Scenario: "pod-partial", Policy: "per-peer", Requests: 1200, Fallbacks: 300, TTFms: TTF{P50: 30000, P99: 30010, Max: 30020.4, N: 300}},
		{Scenario: "pod-partial", Policy: "domain", Requests: 1200, Fallbacks: 12, TTFms: TTF{P50: 1.25, P99: 240, Max: 250, N: 12}, BytesLoaded: 3 << 20},
	})
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("table:\n%s", b.String())
	}
	for _, l := range lines[1:] {
		if len(l) != len(lines[0]) {
			t.Errorf("rows not aligned:\n%s", b.String())
			break
		}
	}
	for _, want := range []string{"per-peer", "30020", "1.2", "3.0"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// TestTableEmptySets: a statistic over no samples prints "-", not 0.0: a
// policy that never fell back has no time to fallback. A statistic whose
// samples happen to be 0 ms still prints its value.
func TestTableEmptySets(t *testing.T) {
	var b bytes.Buffer
	Table(&b, []Report{
		{Scenario: "idle", Policy: "host-group", Requests: 10, Hits: 10, TTHms: TTF{P50: 3, P99: 4, Max: 4, N: 10}},
		{Scenario: "idle", Policy: "domain", Requests: 10, Fallbacks: 10, Affected: 10, TTFms: TTF{N: 10}},
	})
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("table:\n%s", b.String())
	}
	// host-group: no ttf and no tth-domain samples; domain: no tth samples.
	hg, dom := strings.Fields(lines[1]), strings.Fields(lines[2])
	// scenario policy requests hits fallbacks affected false deliberate
	// stuck censored ttf(p50 p99 max) tth(p50 p99) tth-domain(p99) ...
	if got := hg[10:13]; strings.Join(got, " ") != "- - -" {
		t.Errorf("host-group ttf %v, want - - -:\n%s", got, b.String())
	}
	if hg[13] != "3.0" || hg[14] != "4.0" || hg[15] != "-" {
		t.Errorf("host-group tth %v, tth-domain %v:\n%s", hg[13:15], hg[15], b.String())
	}
	if got := dom[10:13]; strings.Join(got, " ") != "0.0 0.0 0.0" {
		t.Errorf("domain ttf %v, want its 0 ms samples:\n%s", got, b.String())
	}
	if dom[13] != "-" || dom[14] != "-" {
		t.Errorf("domain tth %v, want -:\n%s", dom[13:15], b.String())
	}
}

// TestNarrowTableAndLegend: the narrow table keeps the outcome, time to
// fallback, corruption and leak columns and fits in about 100 characters
// for the demo's scenario names; the legend explains every column printed,
// and only those.
func TestNarrowTableAndLegend(t *testing.T) {
	reps := []Report{
		{Scenario: "crash+pod-partial", Policy: "host-group", Requests: 286, Hits: 71, Fallbacks: 215, Affected: 127, FalseFallbacks: 88,
			TTFms: TTF{P50: 2.6, P99: 6.2, Max: 32.4, N: 127}, PeakSlots: 784, BytesLoaded: 18 << 20},
		{Scenario: "crash+pod-partial", Policy: "per-peer", Requests: 286, Hits: 157, Fallbacks: 129, Affected: 128, FalseFallbacks: 1,
			TTFms: TTF{P50: 30008, P99: 30016, Max: 30018, N: 128}, PeakSlots: 444, BytesLoaded: 39 << 20},
	}
	var b bytes.Buffer
	NarrowTable(&b, reps)
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	want := []string{"scenario", "policy", "hits", "fallbacks", "false", "stuck", "ttf p50 ms", "p99 ms", "corrupt", "leaked"}
	if got := strings.Join(strings.Fields(lines[0]), " "); got != strings.Join(want, " ") {
		t.Errorf("narrow heading %q, want %q", got, strings.Join(want, " "))
	}
	for _, l := range lines {
		if len(l) > 100 {
			t.Errorf("narrow table line of %d characters: %q", len(l), l)
		}
	}
	if !strings.Contains(lines[2], "30008") || !strings.Contains(lines[1], "88") {
		t.Errorf("narrow table lost its values:\n%s", b.String())
	}

	for _, narrow := range []bool{true, false} {
		var lb bytes.Buffer
		Legend(&lb, reps, narrow)
		keys := map[string]bool{}
		for _, l := range strings.Split(strings.TrimSpace(lb.String()), "\n")[1:] {
			if len(l) > legendWidth {
				t.Errorf("legend line of %d characters: %q", len(l), l)
			}
			if strings.HasPrefix(l, "    ") {
				continue // a wrapped entry's next line
			}
			k, _, _ := strings.Cut(strings.TrimSpace(l), "  ")
			keys[k] = true
		}
		for _, c := range pick(reportColumns(false), narrow) {
			if c.legend != "" && !keys[c.legend] {
				t.Errorf("narrow=%v: column %q printed without a legend:\n%s", narrow, c.head, lb.String())
			}
		}
		for _, unprinted := range []string{"tth", "orphans", "timers"} {
			if narrow && keys[unprinted] {
				t.Errorf("narrow legend explains %q, which the narrow table does not print:\n%s", unprinted, lb.String())
			}
		}
		if !narrow && !keys["tth-domain"] {
			t.Errorf("wide legend lacks tth-domain:\n%s", lb.String())
		}
	}
}

// TestComputeDeliberate: a fallback the consumer chose (a slow or queued
// load from a live source) is counted apart: in fallbacks and
// deliberate_fallbacks, never in false_fallbacks; one that a fault
// overlapped still counts its time to fallback.
func TestComputeDeliberate(t *testing.T) {
	sc := scenariotest.Fleet(scenariotest.Fault(10*s, scenario.Crash, "a/0"))
	deliberate := func(r Request) Request { r.Deliberate = true; return r }
	reqs := []Request{
		deliberate(req("a/1", 1*s, 2*s, Fallback)),                       // healthy source: not false
		req("a/2", 1*s, 2*s, Fallback),                                   // healthy source: false
		deliberate(req("a/0", 9*s, 10*s+200*time.Millisecond, Fallback)), // affected
		req("a/0", 10*s, 10*s+100*time.Millisecond, Fallback),            // affected
	}
	r := Compute(sc, "p", reqs, 0)
	if r.Fallbacks != 4 || r.DeliberateFallbacks != 2 || r.FalseFallbacks != 1 || r.Affected != 2 || r.TTFms.N != 2 {
		t.Errorf("fallbacks %d deliberate %d false %d affected %d ttf n %d, want 4 2 1 2 2",
			r.Fallbacks, r.DeliberateFallbacks, r.FalseFallbacks, r.Affected, r.TTFms.N)
	}
	var b bytes.Buffer
	Table(&b, []Report{r})
	if !strings.Contains(b.String(), "deliberate") {
		t.Errorf("no deliberate column:\n%s", b.String())
	}
}

// TestComputeConsumerFault: a request whose consumer rank had a fault
// while it was alive (its own engine and sidecar frozen or gone) is
// affected, as one whose source had; its time to fallback runs from the
// earlier of the two faults that overlapped it. Another consumer's fault
// does not touch it.
func TestComputeConsumerFault(t *testing.T) {
	ms := func(v float64) float64 { return v }
	stall := []scenario.Fault{scenariotest.Fault(10*s, scenario.Stall, "d/0"), scenariotest.Fault(13*s, scenario.Heal, "d/0")}
	on := func(cons string, r Request) Request { r.Consumer = cons; return r }
	for _, tc := range []oneCase{
		{"consumer stalled in its life: affected", stall, on("d/0", req("a/1", 9*s, 13*s+40*time.Millisecond, Fallback)), true, false, ms(3040)},
		{"arrives while its consumer is stalled: TTF from arrival", stall, on("d/0", req("a/1", 11*s, 13*s, Fallback)), true, false, ms(2000)},
		{"consumer stalled in its life, hit: affected, no ttf", stall, on("d/0", req("a/1", 9*s, 14*s, Hit)), true, false, -1},
		{"consumer healthy all its life: false", stall, on("d/0", req("a/1", 13*s+1, 14*s, Fallback)), false, true, -1},
		{"resolved before its consumer's fault: false", stall, on("d/0", req("a/1", 8*s, 10*s-1, Fallback)), false, true, -1},
		{"another consumer's fault: false", stall, on("d/1", req("a/1", 9*s, 12*s, Fallback)), false, true, -1},
		{"no consumer recorded: the source alone counts", stall, req("a/1", 9*s, 12*s, Fallback), false, true, -1},
		{"stuck with its consumer crashed: censored from the crash", []scenario.Fault{scenariotest.Fault(30*s, scenario.Crash, "d/0")},
			on("d/0", req("a/1", 20*s, 0, Stuck)), true, false, ms(10000)},
		{"source's fault first: ttf from it", append([]scenario.Fault{scenariotest.Fault(9*s, scenario.Stall, "a/1"), scenariotest.Fault(12*s, scenario.Heal, "a/1")}, stall...),
			on("d/0", req("a/1", 8*s, 13*s, Fallback)), true, false, ms(4000)},
		{"consumer's fault first: ttf from it", append([]scenario.Fault{scenariotest.Fault(11*s, scenario.Crash, "a/1")}, stall...),
			on("d/0", req("a/1", 8*s, 12*s, Fallback)), true, false, ms(2000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := scenariotest.Fleet(tc.faults...)
			sc.Pods[1].Ranks = 2
			rep := Compute(sc, "p", []Request{tc.r}, 0)
			checkOne(t, rep, tc.r, tc.affected, tc.falseFB, tc.ttf)
		})
	}
}

// oneCase is a run of one request r under faults, and its classification.
type oneCase struct {
	name     string
	faults   []scenario.Fault
	r        Request
	affected bool
	falseFB  bool
	ttf      float64 // ms; -1 when the request has no TTF
}

// checkOne checks the report of a run of one request r: affected or not,
// a false fallback or not, and its time to fallback (ms; -1: none).
func checkOne(t *testing.T, rep Report, r Request, affected, falseFB bool, ttf float64) {
	t.Helper()
	if got := rep.Affected == 1; got != affected {
		t.Errorf("affected = %v, want %v", got, affected)
	}
	if got := rep.FalseFallbacks == 1; got != falseFB {
		t.Errorf("false fallback = %v, want %v", got, falseFB)
	}
	want := TTF{}
	if ttf >= 0 {
		c := r.Outcome == Stuck
		want = TTF{P50: ttf, P99: ttf, Max: ttf, N: 1, P50Censored: c, P99Censored: c, MaxCensored: c}
		if c {
			want.Censored = 1
		}
	}
	if rep.TTFms != want {
		t.Errorf("ttf = %+v, want %+v", rep.TTFms, want)
	}
}
