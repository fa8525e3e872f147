package demo

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/report"
	"github.com/kvp2p/kvp2p/internal/scenario"
)

// tinyScenario: two source ranks, one consumer, 3 s of mixed requests, one
// source rank crashes at 1 s (testdata/tiny.yaml, which cmd/kvp2p's demo
// test runs through the command line).
var tinyScenario = mustRead("testdata/tiny.yaml")

func mustRead(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// TestDemoScenarioRecords checks the request records of a run: every
// request resolved after it arrived, hits carry their bytes.
func TestDemoScenarioRecords(t *testing.T) {
	sc, err := scenario.Parse([]byte(strings.Replace(tinyScenario, "kind: crash", "kind: close-control", 1)), "tiny.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := RunScenario(ctx, sc, health.PerPeer, 0, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Requests) != r.Report.Requests || r.Report.Requests == 0 {
		t.Fatalf("%d records for %d requests", len(r.Requests), r.Report.Requests)
	}
	for _, q := range r.Requests {
		switch {
		case q.Outcome == report.Stuck:
			t.Errorf("%s stuck", q.ID)
		case q.Resolved < q.Arrived:
			t.Errorf("%s resolved at %v before it arrived at %v", q.ID, q.Resolved, q.Arrived)
		case q.Outcome == report.Hit && q.Bytes != 4*16384:
			t.Errorf("%s hit with %d bytes", q.ID, q.Bytes)
		case q.Corrupt:
			t.Errorf("%s corrupt", q.ID)
		}
	}
	if r.Report.LeakedSlots != 0 {
		t.Errorf("leaked %d slots", r.Report.LeakedSlots)
	}
}

// everyFault puts every fault kind on real sockets at once; the run must
// end in bounded time with nothing corrupt or leaked.
const everyFault = `name: every-fault
duration: 4s
seed: 3
pods:
  - {name: src, host: 10.0.0.1, ranks: 4, base_port: 7777, domain: pod-s}
  - {name: dst, host: 10.0.0.2, ranks: 1, base_port: 7777}
workload:
  mode: mixed
  rate: 40
  blocks: 4
  block_bytes: 16384
  sources: [src]
  consumers: [dst]
  start: 0s
  stop: 2500ms
faults:
  - {at: 500ms, kind: stall, target: src/0}
  - {at: 500ms, kind: delay, target: src/1, latency: 20ms}
  - {at: 500ms, kind: slow, target: src/3, bytes_per_sec: 1048576}
  - {at: 700ms, kind: goodbye-idle, target: src/2}
  - {at: 1s, kind: blackhole, target: src/1}
  - {at: 1s, kind: refuse-handshake, target: src/2}
  - {at: 1s, kind: close-control, target: src/2}
  - {at: 1500ms, kind: heal, target: src/0}
  - {at: 1500ms, kind: heal, target: src/2}
  - {at: 1800ms, kind: heal, target: src/1}
  - {at: 2s, kind: restart, target: src/2}
  - {at: 2s, kind: blackhole-data, target: src/3}
  - {at: 2200ms, kind: heal, target: src/3}
`

func TestDemoEveryFaultKind(t *testing.T) {
	sc, err := scenario.Parse([]byte(everyFault), "every-fault.yaml")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[scenario.FaultKind]bool{}
	for _, f := range sc.Faults {
		kinds[f.Kind] = true
	}
	for _, k := range scenario.Kinds {
		if !kinds[k] && k != scenario.Crash { // crash: the other tests
			t.Fatalf("the scenario lacks %s", k)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := RunScenario(ctx, sc, health.Domain, 0, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	rep := r.Report
	if rep.Requests == 0 || rep.Hits+rep.Fallbacks+rep.Stuck != rep.Requests {
		t.Errorf("outcomes do not add up: %+v", rep)
	}
	if rep.CorruptLoads != 0 || rep.LeakedSlots != 0 || rep.OrphanSlots != 0 {
		t.Errorf("corrupt, leaked or orphaned: %+v", rep)
	}
}

// TestDemoScenarioTLS runs the tiny scenario with mutual TLS between the
// ranks: the same verdicts as on plain TCP (no corrupt, no leak, hits).
func TestDemoScenarioTLS(t *testing.T) {
	sc, err := scenario.Parse([]byte(tinyScenario), "tiny.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := RunScenario(ctx, sc, health.Domain, 0, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Report.Hits == 0 || r.Report.CorruptLoads != 0 || r.Report.LeakedSlots != 0 || r.Report.Stuck != 0 {
		t.Fatalf("over TLS: %+v", r.Report)
	}
}
