package demo

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/node"
	"github.com/kvp2p/kvp2p/internal/report"
	"github.com/kvp2p/kvp2p/internal/scenario"
	"github.com/kvp2p/kvp2p/internal/workload"
)

// TestReadBackClassifies pins the demo's read-back on a real node: a block
// with the bytes written is intact; one no longer in the store is missing
// and does not fail the load if the store evicted a block since before
// the previous poll (it was evicted after the load, which is what
// per-peer's "corrupt load" was); one gone while the store evicted
// nothing vanished, and one with other bytes is wrong: both fail the load,
// so a real corruption is still counted.
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
	rk := f.cons[0]
	rk.slots = 4 // the fifth block put evicts the least recently used
	if err := f.restart(rk); err != nil {
		t.Fatal(err)
	}
	r := &Run{f: f, sc: sc, want: make([]byte, bb)}
	d := demoNode{r: r, rk: rk, node: rk.node, m: rk.m}
	put := func(k node.Key, b []byte) {
		t.Helper()
		if err := d.m.PutBlock(k, b); err != nil {
			t.Fatal(err)
		}
	}

	key := func(i int) node.Key { return workload.Key(1, 0, 1, i) }
	evicted, intact, wrong, never := key(0), key(1), key(2), key(3)
	d.Poll() // the engine polls every step: the witness starts counting
	put(evicted, r.content(evicted))
	put(intact, r.content(intact))
	bad := append([]byte(nil), r.content(wrong)...)
	bad[bb/2] ^= 0x40 // one bit, mid-block
	put(wrong, bad)
	d.Poll()
	for _, c := range []struct {
		name string
		k    node.Key
		want blockCheck
	}{{"intact", intact, blockIntact}, {"wrong", wrong, blockWrong}, {"never stored, nothing evicted", never, blockVanished}} {
		if got := d.check(c.k); got != c.want {
			t.Errorf("%s block: check = %d, want %d", c.name, got, c.want)
		}
	}
	put(key(4), r.content(key(4)))
	put(key(5), r.content(key(5))) // evicts the oldest: evicted
	if got := d.check(evicted); got != blockMissing {
		t.Errorf("evicted block: check = %d, want %d (missing)", got, blockMissing)
	}

	r.stats.check = readBack{}
	if !d.Verify([]node.Key{intact, evicted}) {
		t.Error("a load with an evicted block failed the read-back: it is missing, not corrupt")
	}
	if d.Verify([]node.Key{intact, wrong}) {
		t.Error("a load with a wrong block passed the read-back")
	}
	d.Poll()
	d.Poll() // the eviction is now before the previous poll
	if d.Verify([]node.Key{intact, never}) {
		t.Error("a load with a block gone while nothing was evicted passed the read-back")
	}
	if got, want := r.stats.check, (readBack{intact: 3, missing: 1, wrong: 1, vanished: 1}); got != want {
		t.Errorf("read-back counts %+v, want %+v", got, want)
	}

	// The report line says what was found.
	var b strings.Builder
	PrintStats(&b, []Result{{Run: report.Run{Policy: health.Domain, Report: report.Report{Scenario: "tiny"}}, stats: r.stats}})
	if !strings.Contains(b.String(), "intact 3 missing 1 wrong 1 vanished 1") {
		t.Errorf("stats line lacks the read-back: %q", b.String())
	}
}
