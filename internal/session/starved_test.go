package session

import (
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/nodetest/testkeys"
)

// TestStarvedPostponesStall: a starvation report moves a running load's
// progress-stall deadline later by its length, progress reported after it
// does not move the deadline back, and a producer that then stays silent
// is still caught by the watchdog at the postponed deadline.
func TestStarvedPostponesStall(t *testing.T) {
	const stall, starved = time.Second, 700 * time.Millisecond
	pr, t0 := runningLoad(t, stall)

	pr.advance(300 * time.Millisecond)
	pr.c.s.Starved(starved)
	pr.c.s.Starved(-time.Second) // never earlier
	// Progress now (before the postponed deadline) must not take it back.
	pr.c.s.DataProgress(pr.now, 1, 0)
	pr.advance(t0.Add(stall + starved - 10*time.Millisecond).Sub(pr.now))
	if c := pr.c.s.Ended(); c != health.CauseNone {
		t.Fatalf("session ended (%v) %v after the load's last data, before the postponed deadline", c, pr.now.Sub(t0))
	}
	pr.noLoad(1)
	pr.advance(10 * time.Millisecond)
	if c := pr.c.s.Ended(); c != health.CauseProgressStall {
		t.Fatalf("at the postponed deadline the session's end is %v, want progress-stall", c)
	}
}

// runningLoad is a ready pair whose consumer runs load 1 (two blocks)
// under a progress watchdog of stall, heartbeats out of the way; t0 is the
// load's submission, its last data so far.
func runningLoad(t *testing.T, stall time.Duration) (*pair, time.Time) {
	t.Helper()
	pr := readyPair(t, func(c, p *Config) {
		c.HeartbeatTimeout, p.HeartbeatTimeout = time.Hour, time.Hour
		c.StallTimeout = stall
	})
	ks := testkeys.Keys("a", 2)
	pr.p.blocks.add(ks...)
	allHit(t, pr.lookup("kv", ks))
	pr.load(1, "kv", ks, false)
	return pr, pr.now
}

// TestStarvedWithoutLoads: a starvation report on a session with no load
// in flight changes nothing.
func TestStarvedWithoutLoads(t *testing.T) {
	pr := readyPair(t, func(c, p *Config) { c.StallTimeout = time.Second })
	pr.c.s.Starved(time.Second)
	pr.advance(time.Second)
	if c := pr.c.s.Ended(); c != health.CauseNone {
		t.Fatalf("ended: %v", c)
	}
}

// TestStarvedPostponesHeartbeat (issue 24: starvation blames nobody): the
// peer's heartbeats sat in the socket buffer while the process could not
// run, so a starvation report moves the heartbeat deadline later by its
// length too; a peer that then stays silent is still timed out.
func TestStarvedPostponesHeartbeat(t *testing.T) {
	const hb, starved = 2 * time.Second, 1500 * time.Millisecond
	pr := readyPair(t, func(c, p *Config) {
		c.HeartbeatTimeout, p.HeartbeatTimeout = hb, hb
		c.HeartbeatInterval, p.HeartbeatInterval = time.Hour, time.Hour
	})
	last := pr.now // the last message the consumer heard
	pr.c.s.Starved(starved)
	pr.c.s.Tick(last.Add(hb + starved - time.Millisecond)) // nothing delivered meanwhile
	if c := pr.c.s.Ended(); c != health.CauseNone {
		t.Fatalf("ended (%v) before the postponed heartbeat deadline", c)
	}
	pr.c.s.Tick(last.Add(hb + starved))
	if c := pr.c.s.Ended(); c != health.CauseHeartbeatTimeout {
		t.Fatalf("at the postponed heartbeat deadline: %v, want heartbeat-timeout", c)
	}
}
