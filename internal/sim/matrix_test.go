package sim

import (
	"context"
	"slices"
	"testing"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/report"
	"github.com/kvp2p/kvp2p/internal/scenario"
)

// TestVariants: one variant, or both timer sets, and domain also without
// its domains.
func TestVariants(t *testing.T) {
	one := Variant{Timers: TimersVLLM, DropDomains: true}
	if got := Variants(health.PerPeer, false, one); !slices.Equal(got, []Variant{one}) {
		t.Errorf("no ablation: %v", got)
	}
	if got := Variants(health.PerPeer, true, one); !slices.Equal(got, []Variant{{Timers: TimersVLLM}, {Timers: TimersKVP2P}}) {
		t.Errorf("per-peer ablation: %v", got)
	}
	want := []Variant{{TimersVLLM, false}, {TimersKVP2P, false}, {TimersVLLM, true}, {TimersKVP2P, true}}
	if got := Variants(health.Domain, true, one); !slices.Equal(got, want) {
		t.Errorf("domain ablation: %v", got)
	}
}

// TestMatrix: runs in order, each handed to add as it ends, and a
// cancelled context runs nothing.
func TestMatrix(t *testing.T) {
	m := Matrix{Scenarios: []*scenario.Scenario{load(t, "rank-crash")}, Policies: []string{health.Domain}}
	var got []report.Run
	if err := m.Run(context.Background(), func(r report.Run) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Policy != health.Domain || got[0].Report.Scenario != "rank-crash" || len(got[0].Requests) != got[0].Report.Requests {
		t.Fatalf("runs %+v", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n := 0
	if err := m.Run(ctx, func(report.Run) error { n++; return nil }); err == nil || n != 0 {
		t.Errorf("cancelled: err %v after %d runs", err, n)
	}
}
