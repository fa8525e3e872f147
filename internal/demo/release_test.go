package demo

import (
	"context"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/node"
	"github.com/kvp2p/kvp2p/internal/scenario"
)

// TestRunFreesFleet checks that a run's fleet is garbage once RunScenario
// returned, even while the caller keeps the *Run (as kvp2p demo's progress
// lines do): one collection frees every node of it. Issue 14: each run's
// fleet outlived it by a collection (a sync.Pool in node.Node), which at
// the scenario's 40 requests/s is 7 GiB that the next run in the same
// process added to, until five runs were OOM-killed.
func TestRunFreesFleet(t *testing.T) {
	sc, err := scenario.Parse([]byte(tinyScenario), "tiny.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var nodes []weak.Pointer[node.Node]
	var kept *Run
	if _, err := RunScenario(ctx, sc, health.Domain, 0, false, func(r *Run) {
		kept = r
		for _, rk := range r.f.ranks {
			nodes = append(nodes, weak.Make(rk.node))
		}
	}); err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 3 {
		t.Fatalf("%d nodes recorded, want the tiny fleet's 3", len(nodes))
	}
	runtime.GC()
	for i, w := range nodes {
		if w.Value() != nil {
			t.Errorf("node %d of the run still reachable after one GC", i)
		}
	}
	runtime.KeepAlive(kept)
}
