package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/loads"
)

// TestStarvedPostponesWatchdog: the table passes a starvation report to its
// sessions (loads.Table.Starved), so the progress watchdog of a load whose
// data path went silent fires that much later; it still fires.
func TestStarvedPostponesWatchdog(t *testing.T) {
	const starved = 800 * time.Millisecond
	tm := loads.KVP2PTimers()
	f := newPair(t, "domain", &tm)
	j := f.load("kv", keysOf("a", 2)) // decoder first: it parks, with Progress frames
	f.n.Advance(500 * time.Millisecond)
	f.p.DataBlackhole = true
	f.n.Advance(100 * time.Millisecond)
	f.c.T.Starved(starved)
	f.n.Advance(tm.StallTimeout + 100*time.Millisecond) // the unpostponed deadline has passed
	if d, ok := f.result(f.c, j); ok {
		t.Fatalf("the watchdog ignored the starvation report: %+v", d.r)
	}
	f.n.Advance(starved)
	d, ok := f.result(f.c, j)
	if !ok || d.r.OK || !strings.Contains(d.r.Reason, "progress-stall") {
		t.Fatalf("silent load after the postponed deadline: %+v (ended %v)", d.r, ok)
	}
}
