package demo

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p"
	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/scenario"
	"github.com/kvp2p/kvp2p/internal/workload"
)

// TestReadBackClassifies pins the demo's read-back on a real node: a block
// with the bytes written is intact, one no longer in the store is missing
// and does not fail the load (it was evicted after the load, which is what
// per-peer's "corrupt load" was), and one with other bytes is wrong and
// fails it: a real corruption is still counted.
func TestReadBackClassifies(t *testing.T) {
	sc, err := scenario.Parse([]byte(tinyScenario), "tiny.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const bb = 16384
	f, err := newDemoFleet(sc, health.Domain, bb, discardLog(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := f.shutdown(ctx); err != nil {
			t.Error(err)
		}
	}()
	r := &Run{f: f, sc: sc, want: make([]byte, bb)}
	d := demoNode{r: r, rk: f.cons[0], node: f.cons[0].node, m: f.cons[0].m}

	intact, wrong, missing := workload.Key(1, 0, 1, 0), workload.Key(1, 0, 1, 1), workload.Key(1, 0, 1, 2)
	if err := d.m.PutBlock(intact, r.content(intact)); err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), r.content(wrong)...)
	bad[bb/2] ^= 0x40 // one bit, mid-block
	if err := d.m.PutBlock(wrong, bad); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name string
		k    kvp2p.Key
		want blockCheck
	}{{"intact", intact, blockIntact}, {"wrong", wrong, blockWrong}, {"missing", missing, blockMissing}} {
		if got := d.check(c.k); got != c.want {
			t.Errorf("%s block: check = %d, want %d", c.name, got, c.want)
		}
	}
	r.stats.check = readBack{}
	if !d.Verify([]kvp2p.Key{intact, missing}) {
		t.Error("a load with an evicted block failed the read-back: it is missing, not corrupt")
	}
	if d.Verify([]kvp2p.Key{intact, wrong, missing}) {
		t.Error("a load with a wrong block passed the read-back")
	}
	if got, want := r.stats.check, (readBack{intact: 2, missing: 2, wrong: 1}); got != want {
		t.Errorf("read-back counts %+v, want %+v", got, want)
	}

	// The report line says what was found.
	var b strings.Builder
	PrintStats(&b, []Result{{Run: scenario.Run{Policy: health.Domain, Report: scenario.Report{Scenario: "tiny"}}, stats: r.stats}})
	if !strings.Contains(b.String(), "intact 2 missing 2 wrong 1") {
		t.Errorf("stats line lacks the read-back: %q", b.String())
	}
}
