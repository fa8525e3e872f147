//go:build lab

package lab

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/report"
	"github.com/kvp2p/kvp2p/internal/scenario"
)

// TestLabScenarios runs five scenarios under the domain policy on real
// processes in network namespaces, faults made by the kernel, and holds
// them to the targets. Behind the build tag lab (go test -tags
// lab ./internal/lab): it needs root and ip/nft/tc/ss, and without them
// it skips, saying which is missing. About 5 minutes. scripts/test.sh
// runs it as root when the tools are there.
//
// It found a real defect: false fallbacks on pod-partial right after the
// heal, from a connect attempt's late DataAttach paired with the next
// attempt's Hello (fixed; see the README's fault lab section).
func TestLabScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("the lab runs real processes for minutes; not with -short")
	}
	if os.Getenv("KVP2P_LAB") == "0" {
		t.Skip("KVP2P_LAB=0")
	}
	if err := Check(); err != nil {
		t.Skipf("the lab cannot run here: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "kvp2p")
	build := exec.Command("go", "build", "-o", bin, "github.com/kvp2p/kvp2p/cmd/kvp2p")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building kvp2p: %v\n%s", err, out)
	}
	l, err := Acquire()
	if err != nil {
		t.Skipf("the lab is busy: %v", err)
	}
	defer l.Release()
	sc := func(name string) *scenario.Scenario {
		s, err := scenario.Load(name)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// slow-crash and slow-blackhole are issue 24's family: slow ranks beside
	// a crash and beside a dark sibling, each must be kept. frozen is its
	// item 4: a consumer and a producer SIGSTOPped for 3 s each, which must
	// not time out their peers for their own lateness.
	for _, s := range []*scenario.Scenario{sc("pod-partial"), sc("slow-crash"), sc("slow-blackhole"), sc("restart"), sc("frozen")} {
		t.Run(s.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			// 64 KiB blocks: a quarter of pod-partial's bytes, so that a
			// shared CI machine (and the race detector) keeps up; the
			// decisions under test do not depend on the block size.
			opt := Options{Bin: bin, BlockBytes: 64 << 10}
			if s.Name == "restart" {
				// The soak's checks on the scenario that starts new
				// processes mid-run: goroutines counted from every serve
				// at time 0 and after the drain, and no growth.
				opt.soak = newSoakState()
			}
			res, err := Run(ctx, s, "domain", opt)
			if err != nil {
				t.Fatal(err)
			}
			if st := opt.soak; st != nil {
				if len(st.gorStart) == 0 || len(st.gorEnd) != len(st.gorStart) {
					t.Errorf("goroutines counted at the start of %d ranks, at the end of %d: want every rank both times", len(st.gorStart), len(st.gorEnd))
				}
				for id, g := range st.gorEnd {
					t.Logf("%s: %d goroutines, %d sessions at the start; %d, %d after the drain", id, st.gorStart[id].goroutines, st.gorStart[id].sessions, g.goroutines, g.sessions)
				}
				if len(st.violations) > 0 {
					t.Errorf("soak checks: %s", strings.Join(st.violations, "; "))
				}
			}
			rep := res.Report
			var tb strings.Builder
			report.Table(&tb, []report.Report{rep})
			t.Logf("\n%s", tb.String())
			if rep.Requests == 0 || rep.Hits == 0 {
				t.Errorf("requests %d, hits %d: the workload did not run", rep.Requests, rep.Hits)
			}
			if rep.TTFms.P99 > 1500 {
				t.Errorf("ttf p99 %.0f ms, want at most 1500", rep.TTFms.P99)
			}
			if rep.FalseFallbacks != 0 || rep.Stuck != 0 || rep.CorruptLoads != 0 || rep.LeakedSlots != 0 {
				t.Errorf("false %d, stuck %d, corrupt %d, leaked %d: want 0 each",
					rep.FalseFallbacks, rep.Stuck, rep.CorruptLoads, rep.LeakedSlots)
			}
			if ns, err := Namespaces(); err != nil || len(ns) != 0 {
				t.Errorf("after the run: namespaces %v (%v), want none", ns, err)
			}
		})
	}
}
