package lab

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/report"
	"github.com/kvp2p/kvp2p/internal/scenario"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/wire"
	"github.com/kvp2p/kvp2p/internal/workload"
)

func TestCheckKindsRefusesWhatTheKernelCannotMake(t *testing.T) {
	for _, k := range scenario.Kinds {
		sc := &scenario.Scenario{Name: "x", Faults: []scenario.Fault{{Kind: k, Line: 7}}}
		err := CheckKinds(sc)
		_, refuse := refused[k]
		switch {
		case refuse && (err == nil || !strings.Contains(err.Error(), "cannot make fault")):
			t.Errorf("%s: %v, want a refusal saying why", k, err)
		case !refuse && err != nil:
			t.Errorf("%s: %v, want it accepted", k, err)
		}
	}
	if len(refused) != 1 {
		t.Errorf("refused kinds %v: the lab makes all but delay", refused)
	}
}

func TestDueOrderPutsLastingFaultsBeforeResets(t *testing.T) {
	fs := []scenario.Fault{
		{Kind: scenario.CloseControl}, {Kind: scenario.BlackholeData}, {Kind: scenario.Crash},
		{Kind: scenario.Heal}, {Kind: scenario.Slow},
	}
	var got []scenario.FaultKind
	for _, f := range dueOrder(fs) {
		got = append(got, f.Kind)
	}
	want := []scenario.FaultKind{scenario.Heal, scenario.BlackholeData, scenario.Slow, scenario.CloseControl, scenario.Crash}
	if !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

func newTestEngine(chunks int) *engine {
	e := &engine{held: map[wire.Key]uint32{}, keyOf: map[uint32]wire.Key{}, ref: make([]int32, chunks),
		pins: map[uint64][]uint32{}, jobs: map[uint64]*ejob{}, loadOf: map[string]uint64{}, hits: map[string][]wire.Key{}}
	for c := chunks - 1; c >= 0; c-- {
		e.free = append(e.free, uint32(c))
	}
	return e
}

func key(b byte) wire.Key { return wire.Key{b} }

// The engine's chunks: cached blocks are evicted oldest first, never one
// that is referenced; a full region refuses; unref frees only uncached
// chunks.
func TestEngineChunks(t *testing.T) {
	e := newTestEngine(2)
	a, _ := e.alloc()
	e.cache(key(1), a)
	b, _ := e.alloc()
	e.cache(key(2), b)
	e.ref[a]++ // key 1 is pinned
	c, ok := e.alloc()
	if !ok || c != b {
		t.Fatalf("alloc = %d, %v; want the unpinned chunk %d", c, ok, b)
	}
	if _, held := e.held[key(2)]; held {
		t.Error("key 2 still cached after its chunk was taken")
	}
	e.ref[c]++
	if _, ok := e.alloc(); ok {
		t.Error("alloc succeeded with every chunk referenced")
	}
	e.unref([]uint32{c})
	if len(e.free) != 1 || e.free[0] != c {
		t.Errorf("free %v after unref of an uncached chunk, want [%d]", e.free, c)
	}
	e.unref([]uint32{a})
	if len(e.free) != 1 {
		t.Errorf("free %v: a cached chunk must stay cached when unreferenced", e.free)
	}
	if e.inUse() != 0 {
		t.Errorf("inUse %d, want 0", e.inUse())
	}
}

// The soak's timeline: the same for a seed, only kinds the lab makes, and
// never two faults on one rank at once (each lasting one is healed before
// the rank's next fault).
func TestSoakScenario(t *testing.T) {
	a, err := SoakScenario(10*time.Minute, 3)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := SoakScenario(10*time.Minute, 3)
	if !slices.Equal(a.Faults, b.Faults) {
		t.Error("two timelines for one seed")
	}
	if err := CheckKinds(a); err != nil {
		t.Error(err)
	}
	seen := map[scenario.FaultKind]bool{}
	open := map[string]bool{}
	for _, f := range a.Faults {
		seen[f.Kind] = true
		for _, id := range a.Ranks(f.Target) {
			switch {
			case f.Kind == scenario.Heal:
				delete(open, id)
			case open[id]:
				t.Errorf("%v %s on %s while its earlier fault is not healed", f.At, f.Kind, id)
			case !f.Kind.Instant():
				open[id] = true
			}
		}
		if f.At >= a.Workload.Stop+10*time.Second {
			t.Errorf("fault at %v, after the workload stopped (%v)", f.At, a.Workload.Stop)
		}
	}
	for _, k := range soakKinds {
		if !seen[k] {
			t.Errorf("10 minutes without a %s", k)
		}
	}
	if _, err := SoakScenario(30*time.Second, 1); err == nil {
		t.Error("a soak shorter than its drain was accepted")
	}
}

// A symmetric request's lookups: the first key's Lookup asks for every
// key of the request (workload.Key), the rest are answered from it in
// order; anything out of order, another request, or a PD request asks
// for its own key alone.
func TestLookupBatching(t *testing.T) {
	r := &run{sc: &scenario.Scenario{Seed: 5, Workload: scenario.Workload{Blocks: 3}},
		cons: []*rank{{id: "dst/0"}, {id: "dst/1"}}, sym: map[string]bool{"dst/1#7": true}}
	k0 := workload.Key(5, 1, 7, 0)
	keys := r.symKeys("dst/1#7", k0)
	if len(keys) != 3 || keys[2] != workload.Key(5, 1, 7, 2) {
		t.Fatalf("keys %v: want the request's 3 keys", keys)
	}
	for _, tc := range []struct {
		id string
		k  wire.Key
	}{
		{"dst/1#7", workload.Key(5, 1, 7, 1)}, // not the first key
		{"dst/0#7", workload.Key(5, 0, 7, 0)}, // not symmetric
		{"dst/9#7", k0},                       // no such consumer
		{"dst/1#x", k0},
	} {
		if got := r.symKeys(tc.id, tc.k); len(got) != 1 || got[0] != tc.k {
			t.Errorf("%s: %v, want its own key alone", tc.id, got)
		}
	}
	m := lookupMemo{id: "dst/1#7", keys: keys, v: []session.Verdict{session.Hit, session.Retry, session.Miss}, next: 1}
	if v, ok := m.take("dst/1#7", keys[1]); !ok || v != session.Retry {
		t.Errorf("second key: %v %v, want Retry from the memo", v, ok)
	}
	if v, ok := m.take("dst/1#7", keys[2]); !ok || v != session.Miss {
		t.Errorf("third key: %v %v, want Miss from the memo", v, ok)
	}
	if _, ok := m.take("dst/1#7", keys[0]); ok {
		t.Error("the next step's first key was answered from the old step's memo")
	}
	m = lookupMemo{id: "dst/1#7", keys: keys, v: make([]session.Verdict, 3), next: 1}
	if _, ok := m.take("dst/1#7", keys[2]); ok || m.id != "" {
		t.Error("a key out of order was answered from the memo, or the memo kept")
	}
}

// TTF from issue is the report's own ttf with each request's arrival
// moved to when the driver handed it over: the driver's lateness out.
func TestIssueLag(t *testing.T) {
	sc, err := scenario.Parse([]byte(`
name: x
duration: 30s
seed: 1
pods:
  - {name: src, host: 10.0.0.1, ranks: 1, base_port: 7777, domain: d}
  - {name: dst, host: 10.0.0.2, ranks: 1, base_port: 7777}
workload: {mode: symmetric, rate: 1, blocks: 1, block_bytes: 4096, sources: [src], consumers: [dst], start: 0s, stop: 20s}
faults:
  - {at: 10s, kind: blackhole, target: src/0}
  - {at: 20s, kind: heal, target: src/0}
`), "x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := time.Second
	reqs := []report.Request{
		{ID: "dst/0#1", Consumer: "dst/0", Source: "src/0", Arrived: 11 * s, Resolved: 12300 * time.Millisecond, Outcome: report.Fallback},
		{ID: "dst/0#2", Consumer: "dst/0", Source: "src/0", Arrived: 2 * s, Resolved: 2100 * time.Millisecond, Outcome: report.Hit},
	}
	issued := map[string]time.Duration{"dst/0#1": 11300 * time.Millisecond, "dst/0#2": 2 * s}
	got := issueLag(sc, "domain", reqs, issued)
	if want := "ttf from their issue p50/p99/max 1000.0/1000.0/1000.0 ms"; !strings.Contains(got, want) {
		t.Errorf("%q, want it to contain %q", got, want)
	}
	if want := "by p50/p99/max 300.0/300.0/300 ms"; !strings.Contains(got, want) {
		t.Errorf("%q, want it to contain %q", got, want)
	}
	if reqs[0].Arrived != 11*s {
		t.Error("the records were changed")
	}
}
