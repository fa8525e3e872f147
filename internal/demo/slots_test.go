package demo

import (
	"context"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/node"
	"github.com/kvp2p/kvp2p/internal/scenario"
)

// TestDemoReportsDroppedRelease runs the tiny scenario with a release
// dropped on the consumer from 1 s on (one Filling slot more than its
// loads hold, as kvp2p's TestSlotUseCountsDroppedRelease makes in a real
// store): the report must count exactly that one orphan, over a run whose
// own slots all had owners, and a peak of slots in use that saw the loads.
func TestDemoReportsDroppedRelease(t *testing.T) {
	sc, err := scenario.Parse([]byte(tinyScenario), "tiny.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	realOrphans, samples, leaking := 0, 0, 0
	r, err := RunScenario(ctx, sc, health.Domain, 0, false, func(run *Run) {
		consumer := run.f.cons[0]
		run.slots.use = func(rk *demoRank) (node.SlotUse, error) {
			u, err := rk.m.SlotUse()
			if err != nil {
				return u, err
			}
			samples++
			realOrphans = max(realOrphans, u.Orphans())
			if rk == consumer && !run.zero.IsZero() && run.now() >= time.Second {
				leaking++
				u.Filling++ // the slot whose release was dropped
			}
			return u, nil
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	rep := r.Report
	if samples == 0 || leaking == 0 {
		t.Fatalf("the check never ran (%d samples, %d with the leak)", samples, leaking)
	}
	if realOrphans != 0 {
		t.Errorf("the run itself had %d orphaned slots", realOrphans)
	}
	if rep.OrphanSlots != 1 {
		t.Errorf("orphan_slots %d, want the 1 dropped release", rep.OrphanSlots)
	}
	if rep.Hits == 0 || rep.PeakSlots < sc.Workload.Blocks {
		t.Errorf("peak_slots %d with %d hits: the check did not see a load's %d slots", rep.PeakSlots, rep.Hits, sc.Workload.Blocks)
	}
}
