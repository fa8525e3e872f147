package workload

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/report"
	"github.com/kvp2p/kvp2p/internal/scenario"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// fakeNode is a node that answers from its fields and logs every call.
type fakeNode struct {
	name    string
	log     *[]string
	status  Status
	verdict session.Verdict // every lookup's answer
	newErr  error           // NewRequest's
	loadErr error           // SubmitLoad's
	bad     bool            // Verify fails
	nextJob uint64
	blocks  map[wire.Key]bool
	polled  []loads.JobResult // what Poll returns once
	onFlush func()            // runs inside Flush
	busy    bool
	params  map[string]loads.TransferParams
}

func newFake(name string, log *[]string) *fakeNode {
	return &fakeNode{name: name, log: log, verdict: session.Hit, blocks: map[wire.Key]bool{},
		params: map[string]loads.TransferParams{}}
}

func (f *fakeNode) logf(format string, a ...any) {
	*f.log = append(*f.log, f.name+" "+fmt.Sprintf(format, a...))
}

func (f *fakeNode) Status() Status { return f.status }
func (f *fakeNode) NewRequest(id string, p loads.TransferParams) error {
	f.logf("new %s", id)
	if f.newErr == nil {
		f.params[id] = p
	}
	return f.newErr
}
func (f *fakeNode) Lookup(id string, k wire.Key) session.Verdict {
	f.logf("lookup %s", id)
	return f.verdict
}
func (f *fakeNode) EndStep() { f.logf("endstep") }
func (f *fakeNode) SubmitLoad(id string, keys []wire.Key) (uint64, error) {
	f.logf("load %s %d", id, len(keys))
	if f.loadErr != nil {
		return 0, f.loadErr
	}
	f.nextJob++
	return f.nextJob, nil
}
func (f *fakeNode) SubmitStore(id string, keys []wire.Key) { f.logf("store %s %d", id, len(keys)) }
func (f *fakeNode) RequestFinished(id string)              { f.logf("finished %s", id) }
func (f *fakeNode) PutBlocks(keys []wire.Key) {
	f.logf("put %d", len(keys))
	for _, k := range keys {
		f.blocks[k] = true
	}
}
func (f *fakeNode) Verify(keys []wire.Key) bool {
	f.logf("verify %d", len(keys))
	return !f.bad
}
func (f *fakeNode) Flush() {
	f.logf("flush")
	if f.onFlush != nil {
		g := f.onFlush
		f.onFlush = nil
		g()
	}
}
func (f *fakeNode) Poll() []loads.JobResult {
	rs := f.polled
	f.polled = nil
	return rs
}
func (f *fakeNode) Busy(b bool) { f.busy = b }

type fakeFleet struct {
	cons, srcs []*fakeNode
}

func (f *fakeFleet) Consumer(i int) Node {
	if f.cons[i] == nil {
		return nil
	}
	return f.cons[i]
}

func (f *fakeFleet) Source(j int) Node {
	if f.srcs[j] == nil {
		return nil
	}
	return f.srcs[j]
}

type rig struct {
	t   *testing.T
	log []string
	fl  *fakeFleet
	e   *Engine
}

// newRig: one consumer dst/0, one source src/0, and one request, at
// first(1).
func newRig(t *testing.T, mode scenario.Mode) *rig {
	t.Helper()
	r := &rig{t: t}
	r.fl = &fakeFleet{cons: []*fakeNode{newFake("dst/0", &r.log)}, srcs: []*fakeNode{newFake("src/0", &r.log)}}
	cfg := Config{
		Workload: scenario.Workload{Mode: mode, Rate: 1, Blocks: 2, BlockBytes: 1000, Stop: first(1) + 1},
		Seed:     1, Consumers: []string{"dst/0"},
		Sources:      []Source{{ID: "src/0", Host: "10.0.0.1", Port: 7777, Domain: "pod-s"}},
		PrefillDelay: 20 * time.Millisecond,
	}
	e, err := New(cfg, r.fl)
	if err != nil {
		t.Fatal(err)
	}
	r.e = e
	return r
}

func (r *rig) cons() *fakeNode { return r.fl.cons[0] }
func (r *rig) src() *fakeNode  { return r.fl.srcs[0] }

// take returns the calls logged since the last take.
func (r *rig) take() []string {
	l := r.log
	r.log = nil
	return l
}

func (r *rig) expect(want ...string) {
	r.t.Helper()
	if got := r.take(); !slices.Equal(got, want) {
		r.t.Fatalf("calls:\n got  %s\n want %s", strings.Join(got, " | "), strings.Join(want, " | "))
	}
}

// first is the arrival time of the first request of consumer 0 (seed 1).
func first(rate float64) time.Duration {
	rng := rand.New(rand.NewPCG(1, 0))
	return time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
}

func TestNewRejectsEmpty(t *testing.T) {
	if _, err := New(Config{Sources: []Source{{ID: "s"}}}, &fakeFleet{}); err == nil {
		t.Error("no consumer: no error")
	}
	if _, err := New(Config{Consumers: []string{"c"}}, &fakeFleet{}); err == nil {
		t.Error("no source: no error")
	}
	if _, err := New(Config{Consumers: []string{"c"}, Sources: []Source{{ID: "s"}}}, nil); err == nil {
		t.Error("nil fleet: no error")
	}
}

// TestArrivalsMatchTheStream cross-checks the arrivals against a naive
// reading of the documented random stream: PCG(seed, i), per request the
// gap, the source, then (mixed) the mode.
func TestArrivalsMatchTheStream(t *testing.T) {
	var log []string
	mk := func() *fakeFleet {
		return &fakeFleet{
			cons: []*fakeNode{newFake("a/0", &log), newFake("a/1", &log)},
			srcs: []*fakeNode{newFake("s/0", &log), newFake("s/1", &log), newFake("s/2", &log)},
		}
	}
	w := scenario.Workload{Mode: scenario.ModeMixed, Rate: 50, Blocks: 3, BlockBytes: 10,
		Start: 100 * time.Millisecond, Stop: 900 * time.Millisecond}
	cfg := Config{Workload: w, Seed: 42, Consumers: []string{"a/0", "a/1"},
		Sources: []Source{{ID: "s/0"}, {ID: "s/1"}, {ID: "s/2"}}}
	e, err := New(cfg, mk())
	if err != nil {
		t.Fatal(err)
	}
	for now := time.Duration(0); now <= time.Second; now += 10 * time.Millisecond {
		e.Step(now)
	}
	got := e.Requests()

	var want []report.Request
	for i, c := range cfg.Consumers {
		rng := rand.New(rand.NewPCG(42, uint64(i)))
		gap := func() time.Duration { return time.Duration(rng.ExpFloat64() / w.Rate * float64(time.Second)) }
		next := gap() + w.Start
		for seq := 1; next < w.Stop; seq++ {
			at := next
			next += gap()
			src := cfg.Sources[rng.IntN(3)].ID
			mode := scenario.ModeSymmetric
			if rng.IntN(2) == 0 {
				mode = scenario.ModePD
			}
			want = append(want, report.Request{ID: fmt.Sprintf("%s#%d", c, seq), Consumer: c, Source: src, Mode: mode, Arrived: at})
		}
	}
	key := func(q report.Request) string { return q.ID }
	slices.SortFunc(got, func(a, b report.Request) int { return strings.Compare(key(a), key(b)) })
	slices.SortFunc(want, func(a, b report.Request) int { return strings.Compare(key(a), key(b)) })
	if len(got) != len(want) || len(got) < 40 {
		t.Fatalf("%d requests, want %d (and some 80)", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.ID != w.ID || g.Source != w.Source || g.Mode != w.Mode || g.Arrived != w.Arrived {
			t.Fatalf("request %d: got %+v, want %+v", i, g, w)
		}
	}

	// A second engine over the same config makes the same requests.
	log = nil
	e2, err := New(cfg, mk())
	if err != nil {
		t.Fatal(err)
	}
	for now := time.Duration(0); now <= time.Second; now += 10 * time.Millisecond {
		e2.Step(now)
	}
	again := e2.Requests()
	slices.SortFunc(again, func(a, b report.Request) int { return strings.Compare(key(a), key(b)) })
	for i := range got {
		if got[i] != again[i] {
			t.Fatalf("two runs differ at %d: %+v vs %+v", i, got[i], again[i])
		}
	}
}

func TestKeyAndParams(t *testing.T) {
	seen := map[wire.Key]bool{}
	for c := range 3 {
		for seq := 1; seq <= 50; seq++ {
			for i := range 4 {
				k := Key(9, c, seq, i)
				if seen[k] {
					t.Fatalf("key (%d,%d,%d) repeats", c, seq, i)
				}
				seen[k] = true
				if k != Key(9, c, seq, i) {
					t.Fatal("key not stable")
				}
			}
		}
	}
	if Key(1, 0, 1, 0) == Key(2, 0, 1, 0) {
		t.Error("the seed does not change the keys")
	}
	src := Source{ID: "s/1", Host: "10.0.0.1", Port: 7778, Domain: "pod"}
	p := Params(src, "kv", true)
	if p.RemotePrefiller == nil || p.RemoteKVSource != nil || *p.RemotePrefiller != (loads.Remote{KVRequestID: "kv", RemoteHost: "10.0.0.1", RemotePort: 7778, RemoteDomain: "pod"}) {
		t.Errorf("PD params %+v", p)
	}
	p = Params(src, "kv", false)
	if p.RemoteKVSource == nil || p.RemotePrefiller != nil || p.RemoteKVSource.RemotePort != 7778 {
		t.Errorf("symmetric params %+v", p)
	}
}

// TestSymmetricHit: the source gets the blocks, the consumer registers,
// looks every key up, loads, flushes the step; an OK result delivered
// from the node's Flush is verified at once and resolved at the next step.
func TestSymmetricHit(t *testing.T) {
	r := newRig(t, scenario.ModeSymmetric)
	at := first(1)
	r.e.Step(at - 1)
	r.expect("dst/0 flush")
	if n, _ := r.e.Counts(); n != 0 {
		t.Fatalf("%d requests before the first arrival", n)
	}
	r.e.Step(at)
	r.expect("src/0 put 2", "dst/0 new dst/0#1", "dst/0 flush",
		"dst/0 lookup dst/0#1", "dst/0 lookup dst/0#1", "dst/0 load dst/0#1 2", "dst/0 flush",
		"dst/0 endstep", "dst/0 flush")
	if p := r.cons().params["dst/0#1"]; p.RemoteKVSource == nil || p.RemoteKVSource.RemoteHost != "10.0.0.1" {
		t.Fatalf("params %+v", p)
	}
	if !r.cons().busy {
		t.Fatal("not busy with a load in flight")
	}
	r.e.Deliver(0, r.cons(), []loads.JobResult{{Job: 1, Kind: loads.JobLoad, OK: true}})
	r.expect("dst/0 verify 2")
	r.e.Step(at + 10*time.Millisecond)
	r.expect("dst/0 flush", "dst/0 finished dst/0#1")
	if r.cons().busy {
		t.Fatal("busy with nothing in flight")
	}
	q := r.e.Requests()[0]
	if q.Outcome != report.Hit || q.Bytes != 2000 || q.Resolved != at+10*time.Millisecond || q.Corrupt {
		t.Fatalf("record %+v", q)
	}
	if n, res := r.e.Counts(); n != 1 || res != 1 {
		t.Fatalf("counts %d/%d", res, n)
	}
}

func TestCorruptLoadFallsBack(t *testing.T) {
	r := newRig(t, scenario.ModeSymmetric)
	r.cons().bad = true
	at := first(1)
	r.e.Step(at)
	r.take()
	r.cons().polled = []loads.JobResult{{Job: 1, Kind: loads.JobLoad, OK: true}} // the Poll path
	r.e.Step(at + time.Millisecond)
	r.expect("dst/0 flush", "dst/0 verify 2", "dst/0 finished dst/0#1")
	if q := r.e.Requests()[0]; q.Outcome != report.Fallback || !q.Corrupt || q.Bytes != 0 {
		t.Fatalf("record %+v", q)
	}
}

// TestFailedLoadDuringFlush: a load that cannot start fails inside the
// Flush after SubmitLoad (the job is known by then); the engine acts on it
// at the next step, and a failed load is not verified.
func TestFailedLoadDuringFlush(t *testing.T) {
	r := newRig(t, scenario.ModeSymmetric)
	c := r.cons()
	delivered := false
	var flush func()
	flush = func() {
		if l := r.log; len(l) >= 2 && strings.HasPrefix(l[len(l)-2], "dst/0 load ") {
			r.e.Deliver(0, c, []loads.JobResult{{Job: 1, Kind: loads.JobLoad, OK: false, Reason: "no session"}})
			delivered = true
			return
		}
		c.onFlush = flush
	}
	c.onFlush = flush
	at := first(1)
	r.e.Step(at)
	if !delivered {
		t.Fatal("no flush right after SubmitLoad")
	}
	if q := r.e.Requests()[0]; q.Outcome != report.Stuck {
		t.Fatalf("resolved within the step: %+v", q)
	}
	r.take()
	r.e.Step(at + 10*time.Millisecond)
	r.expect("dst/0 flush", "dst/0 finished dst/0#1")
	if q := r.e.Requests()[0]; q.Outcome != report.Fallback || q.Corrupt || q.Resolved != at+10*time.Millisecond {
		t.Fatalf("record %+v", q)
	}
}

// TestPDPrefill: a PD request is prefilled on the source that took it
// once due: kept while that incarnation is paused, run when up.
func TestPDPrefill(t *testing.T) {
	r := newRig(t, scenario.ModePD)
	r.cons().verdict = session.Retry
	at := first(1)
	r.e.Step(at)
	r.expect("dst/0 new dst/0#1", "dst/0 flush", "dst/0 lookup dst/0#1")
	r.src().status = Paused
	r.e.Step(at + 20*time.Millisecond)
	r.expect("dst/0 flush", "dst/0 lookup dst/0#1")
	r.src().status = Up
	r.e.Step(at + 20*time.Millisecond)
	r.expect("src/0 new dst/0#1", "src/0 put 2", "src/0 store dst/0#1 2", "src/0 finished dst/0#1", "src/0 flush",
		"dst/0 flush", "dst/0 lookup dst/0#1")
	if p := r.src().params["dst/0#1"]; p.RemoteDecoder == nil || p.RemoteDecoder.KVRequestID != "dst/0#1" {
		t.Fatalf("prefill params %+v", p)
	}
	r.e.Step(at + 40*time.Millisecond)
	r.expect("dst/0 flush", "dst/0 lookup dst/0#1") // done once
}

func TestPrefillNotDueAndRefused(t *testing.T) {
	r := newRig(t, scenario.ModePD)
	r.cons().verdict = session.Retry
	r.src().newErr = fmt.Errorf("refused")
	at := first(1)
	r.e.Step(at)
	r.take()
	r.e.Step(at + 19*time.Millisecond)
	r.expect("dst/0 flush", "dst/0 lookup dst/0#1")
	r.e.Step(at + 20*time.Millisecond)
	r.expect("src/0 new dst/0#1", "src/0 flush", "dst/0 flush", "dst/0 lookup dst/0#1")
}

func TestMissAndErrorsFallBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*fakeNode)
		want []string
	}{
		{"miss", func(f *fakeNode) { f.verdict = session.Miss }, []string{
			"dst/0 new dst/0#1", "dst/0 flush", "dst/0 lookup dst/0#1", "dst/0 lookup dst/0#1",
			"dst/0 finished dst/0#1", "dst/0 endstep", "dst/0 flush"}},
		{"new-request", func(f *fakeNode) { f.newErr = fmt.Errorf("no") }, []string{
			"dst/0 new dst/0#1", "dst/0 finished dst/0#1", "dst/0 flush"}},
		{"submit-load", func(f *fakeNode) { f.loadErr = fmt.Errorf("closed") }, []string{
			"dst/0 new dst/0#1", "dst/0 flush", "dst/0 lookup dst/0#1", "dst/0 lookup dst/0#1",
			"dst/0 load dst/0#1 2", "dst/0 finished dst/0#1", "dst/0 endstep", "dst/0 flush"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, scenario.ModeSymmetric)
			tc.set(r.cons())
			r.e.Step(first(1))
			got := r.take()
			if got[0] != "src/0 put 2" || !slices.Equal(got[1:], tc.want) {
				t.Fatalf("calls %q", got)
			}
			if q := r.e.Requests()[0]; q.Outcome != report.Fallback || q.Resolved != first(1) {
				t.Fatalf("record %+v", q)
			}
		})
	}
}

// TestMixedRetryThenMiss: one key's Retry keeps a request waiting; a Miss
// on any key wins over Retry.
func TestMixedRetryThenMiss(t *testing.T) {
	r := newRig(t, scenario.ModeSymmetric)
	r.cons().verdict = session.Retry
	at := first(1)
	r.e.Step(at)
	r.take()
	if q := r.e.Requests()[0]; q.Outcome != report.Stuck {
		t.Fatalf("resolved on Retry: %+v", q)
	}
	r.cons().verdict = session.Miss
	r.e.Step(at + 10*time.Millisecond)
	if q := r.e.Requests()[0]; q.Outcome != report.Fallback {
		t.Fatalf("not a fallback on Miss: %+v", q)
	}
}

// TestDownConsumerAndAbandon: a paused or missing consumer takes no step
// (its arrivals wait); EndRun leaves the unresolved Stuck, finishes them
// on the current node, and drops the prefills.
func TestDownConsumerAndAbandon(t *testing.T) {
	r := newRig(t, scenario.ModePD)
	c := r.cons()
	at := first(1)
	c.status = Paused
	r.e.Step(at)
	r.expect()
	r.fl.cons[0] = nil
	r.e.Step(at)
	r.expect()
	r.fl.cons[0] = c
	c.status = Up
	c.verdict = session.Retry
	r.e.Step(at)
	r.expect("dst/0 new dst/0#1", "dst/0 flush", "dst/0 lookup dst/0#1")
	r.e.EndRun()
	r.expect("dst/0 finished dst/0#1")
	if c.busy {
		t.Error("busy after EndRun")
	}
	r.e.Step(time.Hour) // no prefill left; arrivals stop at Stop
	got := r.take()
	if slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "src/0") }) {
		t.Fatalf("a prefill ran after EndRun: %q", got)
	}
	if q := r.e.Requests()[0]; q.Outcome != report.Stuck {
		t.Fatalf("record %+v", q)
	}
}

// TestDeliverIgnores: results of other kinds, unknown jobs and requests no
// longer loading are ignored.
func TestDeliverIgnores(t *testing.T) {
	r := newRig(t, scenario.ModeSymmetric)
	at := first(1)
	r.e.Step(at)
	r.take()
	r.e.Deliver(0, r.cons(), []loads.JobResult{{Job: 1, Kind: loads.JobStore, OK: true}, {Job: 7, Kind: loads.JobLoad, OK: true}})
	r.expect()
	r.e.Deliver(0, r.cons(), []loads.JobResult{{Job: 1, Kind: loads.JobLoad, OK: true}})
	r.e.Deliver(0, r.cons(), []loads.JobResult{{Job: 1, Kind: loads.JobLoad, OK: true}}) // twice: once
	r.expect("dst/0 verify 2")
}
