package session

import (
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/nodetest/testkeys"
)

// TestQueuedLoadOnSlowLinkNotStalled (issue 24): a load queued behind the
// session's other loads on a slow link gets no bytes of its own for longer
// than the stall timeout, but the data connection keeps delivering the
// other load's bytes: it is not stalled. Once the whole data connection
// falls silent, the watchdog ends the session one stall timeout after the
// last data, as before.
func TestQueuedLoadOnSlowLinkNotStalled(t *testing.T) {
	const stall = time.Second
	pr := readyPair(t, func(c, p *Config) {
		c.HeartbeatTimeout, p.HeartbeatTimeout = time.Hour, time.Hour
		c.StallTimeout = stall
		c.LoadStartBudget = 0
	})
	a, b := testkeys.Keys("a", 2), testkeys.Keys("b", 2)
	pr.p.blocks.add(a...)
	pr.p.blocks.add(b...)
	allHit(t, pr.lookup("kv1", a))
	allHit(t, pr.lookup("kv2", b))
	pr.load(1, "kv1", a, false)
	pr.load(2, "kv2", b, false)
	// Job 1's bytes trickle in every 200 ms for 3 s; job 2 hears nothing.
	var last time.Time
	for i := 1; i <= 15; i++ {
		pr.advance(200 * time.Millisecond)
		pr.c.s.DataProgress(pr.now, 1, uint64(i))
		last = pr.now
	}
	if c := pr.c.s.Ended(); c != health.CauseNone {
		t.Fatalf("session ended (%v) while its data connection delivered", c)
	}
	// Then silence on the whole connection.
	pr.advance(last.Add(stall - 10*time.Millisecond).Sub(pr.now))
	if c := pr.c.s.Ended(); c != health.CauseNone {
		t.Fatalf("ended (%v) before a stall timeout of silence", c)
	}
	pr.advance(10 * time.Millisecond)
	if c := pr.c.s.Ended(); c != health.CauseProgressStall {
		t.Fatalf("after a stall timeout of silence the end is %v, want progress-stall", c)
	}
}
