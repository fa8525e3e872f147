//go:build lab

package lab

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/report"
	"github.com/kvp2p/kvp2p/internal/scenario"
	"github.com/kvp2p/kvp2p/internal/sim"
)

// TestLabMatchesSimulator (issue 24 item 5): one scenario with a data
// blackhole, in the simulator and in the lab (the kernel's TCP), under
// the default policy; their verdicts must agree. Both run the same
// workload (same seed, 64 KiB blocks), so the requests are the same ids:
// each request's outcome (hit or fallback) is compared, and at most 3% may
// differ (the lab's timing is real: a request at a fault's edge may land
// on either side). Before the simulator held a blackholed stream as TCP
// does, the two disagreed on what a blackhole does (README, fault lab).
// About 70 s; needs what TestLabScenarios needs.
func TestLabMatchesSimulator(t *testing.T) {
	if testing.Short() {
		t.Skip("the lab runs real processes for minutes; not with -short")
	}
	if os.Getenv("KVP2P_LAB") == "0" {
		t.Skip("KVP2P_LAB=0")
	}
	if err := Check(); err != nil {
		t.Skipf("the lab cannot run here: %v", err)
	}
	sc, err := scenario.Load("pod-partial")
	if err != nil {
		t.Fatal(err)
	}
	sc.Workload.BlockBytes = 64 << 10 // as the lab runs it: see TestLabScenarios
	simRes, err := sim.Run(sc, "domain", sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "kvp2p")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/kvp2p/kvp2p/cmd/kvp2p").CombinedOutput(); err != nil {
		t.Fatalf("building kvp2p: %v\n%s", err, out)
	}
	l, err := Acquire()
	if err != nil {
		t.Skipf("the lab is busy: %v", err)
	}
	defer l.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	labRes, err := Run(ctx, sc, "domain", Options{Bin: bin, BlockBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	outcome := map[string]report.Outcome{}
	for _, r := range simRes.Requests {
		outcome[r.ID] = r.Outcome
	}
	differ, n := 0, 0
	for _, r := range labRes.Requests {
		o, ok := outcome[r.ID]
		if !ok {
			continue
		}
		n++
		if o != r.Outcome {
			differ++
		}
	}
	s, b := simRes.Report, labRes.Report
	t.Logf("sim: %d requests, %d fallbacks, %d false, ttf p99 %.0f ms; lab: %d requests, %d fallbacks, %d false, ttf p99 %.0f ms; %d of %d outcomes differ",
		s.Requests, s.Fallbacks, s.FalseFallbacks, s.TTFms.P99, b.Requests, b.Fallbacks, b.FalseFallbacks, b.TTFms.P99, differ, n)
	if n < len(simRes.Requests)*9/10 {
		t.Fatalf("only %d of the simulator's %d requests found in the lab's run: not the same workload", n, len(simRes.Requests))
	}
	if differ*100 > n*3 {
		t.Errorf("%d of %d requests' outcomes differ between the simulator and the lab (more than 3%%)", differ, n)
	}
	if s.FalseFallbacks != 0 || b.FalseFallbacks != 0 {
		t.Errorf("false fallbacks: sim %d, lab %d; want 0 in both", s.FalseFallbacks, b.FalseFallbacks)
	}
}
