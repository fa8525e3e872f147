package session

import (
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/nodetest/testkeys"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// The slow judgment (slow.go), scripted on the session: a consumer load
// of 64 blocks (256 KiB) with a 10 s symmetric load timeout and a 500 ms
// window; the test feeds DataProgress as the data path would.

const slowBlocks = 64

func slowPair(t *testing.T) *pair {
	pr := readyPair(t, func(c, p *Config) {
		c.HeartbeatTimeout, p.HeartbeatTimeout = time.Hour, time.Hour
		c.StallTimeout = time.Second
		c.SlowWindow = 500 * time.Millisecond
	})
	a, b := testkeys.Keys("a", slowBlocks), testkeys.Keys("b", 2)
	pr.p.blocks.add(a...)
	pr.p.blocks.add(b...)
	allHit(t, pr.lookup("kv1", a))
	allHit(t, pr.lookup("kv2", b))
	pr.load(1, "kv1", a, false)
	pr.load(2, "kv2", b, false)
	return pr
}

// feed delivers job 1's bytes every step for d at bps (cumulative from
// got) and returns the new count; it stops at the first decision.
func feed(pr *pair, got uint64, bps float64, step, d time.Duration) (uint64, bool) {
	pr.t.Helper()
	for end := pr.now.Add(d); pr.now.Before(end); {
		pr.advance(step)
		got += uint64(bps * step.Seconds())
		if pr.c.s.DataProgress(pr.now, 1, got) {
			pr.c.collect(pr.t)
			return got, true
		}
	}
	return got, false
}

func slowFailed(sd *side) bool {
	for _, r := range sd.loads {
		if r.Job == 1 && !r.OK && r.Reason == ReasonSlow {
			return true
		}
	}
	return false
}

// TestSlowHopelessLoadFails: at 16 KiB/s 256 KiB need 16 s of 10: the load
// fails deliberately after one window of bytes, not before; the session
// stays ready with its other load, and reads slow.
func TestSlowHopelessLoadFails(t *testing.T) {
	pr := slowPair(t)
	start := pr.now
	got, decided := feed(pr, 0, 16<<10, 100*time.Millisecond, 2*time.Second)
	if !decided || !slowFailed(pr.c) {
		t.Fatalf("no deliberate failure (%d bytes, results %+v)", got, pr.c.loads)
	}
	// First bytes at 100 ms; judged from 600 ms on.
	if took := pr.now.Sub(start); took < 600*time.Millisecond || took > 700*time.Millisecond {
		t.Fatalf("decided after %v, want after one window of bytes (600-700 ms)", took)
	}
	if c := pr.c.s.Ended(); c != health.CauseNone || !pr.c.s.Ready() {
		t.Fatalf("session ended (%v): slow is not dead", c)
	}
	if !pr.c.s.Slow(pr.now) {
		t.Fatal("session not slow after a slow judgment")
	}
	for _, r := range pr.c.loads {
		if r.Job == 2 {
			t.Fatalf("the other load ended with the slow one: %+v", r)
		}
	}
	if !sentAbort(pr.c, 1) {
		t.Fatal("no abort sent for the failed load: the producer would go on sending it")
	}
}

func sentAbort(sd *side, job uint64) bool {
	for _, m := range sd.sent {
		if a, ok := m.(*wire.Abort); ok && a.Job == job {
			return true
		}
	}
	return false
}

// TestSlowNoJudgmentTooEarly: one large first chunk, then nothing new for
// less than a window: no judgment, however slow the start looks; nor on
// less than a block of new bytes over a window.
func TestSlowNoJudgmentTooEarly(t *testing.T) {
	pr := slowPair(t)
	pr.advance(3 * time.Second) // a slow start: the round trip, the queue
	if pr.c.s.DataProgress(pr.now, 1, testBlockBytes) {
		t.Fatal("judged on its first bytes")
	}
	for i := 0; i < 4; i++ {
		pr.advance(100 * time.Millisecond)
		if pr.c.s.DataProgress(pr.now, 1, testBlockBytes+uint64(i)) {
			t.Fatalf("judged %d ms after the first bytes", (i+1)*100)
		}
	}
	// A window with less than a block more: too little to judge.
	pr.advance(200 * time.Millisecond)
	if pr.c.s.DataProgress(pr.now, 1, testBlockBytes+testBlockBytes/2) {
		t.Fatal("judged on half a block")
	}
	if pr.c.s.Slow(pr.now) {
		t.Fatal("slow without a judgment")
	}
}

// TestSlowFinishingLoadWaits: at 30 KiB/s the 256 KiB take 8.5 s of 10: the
// load is slow for a while (with the 5/4 margin) but never failed.
func TestSlowFinishingLoadWaits(t *testing.T) {
	pr := slowPair(t)
	got, decided := feed(pr, 0, 30<<10, 100*time.Millisecond, time.Second)
	if decided {
		t.Fatalf("a load that finishes in time failed: %+v", pr.c.loads)
	}
	if !pr.c.s.Slow(pr.now) {
		t.Fatal("8.5 s of 10 with the 5/4 margin: want slow")
	}
	if got, decided = feed(pr, got, 30<<10, 100*time.Millisecond, 6*time.Second); decided {
		t.Fatalf("failed at %d bytes: %+v", got, pr.c.loads)
	}
}

// TestSlowStarvationNotCounted: the consumer's own loop starved for 1.5 s
// in the middle of a load that would finish in time; the bytes that sat
// in the buffers meanwhile arrive at once. Counted over the starved span
// the rate would fail the load (the control case); Starved takes that
// span out.
func TestSlowStarvationNotCounted(t *testing.T) {
	for _, starved := range []bool{false, true} {
		pr := slowPair(t)
		got, decided := feed(pr, 0, 40<<10, 100*time.Millisecond, 3*time.Second)
		if decided {
			t.Fatal("failed before the starvation")
		}
		pr.now = pr.now.Add(1500 * time.Millisecond) // the loop did not run: no tick, no event
		if starved {
			pr.c.s.Starved(1500 * time.Millisecond)
		}
		// What sat in the socket buffer meanwhile, read at once.
		got += 16 << 10
		decided = pr.c.s.DataProgress(pr.now, 1, got)
		if starved && decided {
			t.Fatal("the consumer's own starvation counted as the producer's slowness")
		}
		if !starved && !decided {
			t.Fatal("control: without Starved the load should have been judged hopeless")
		}
	}
}

// TestSlowJudgmentNoAlloc: the judgment runs for every chunk that lands;
// it allocates nothing.
func TestSlowJudgmentNoAlloc(t *testing.T) {
	pr := slowPair(t)
	got := uint64(0)
	allocs := testing.AllocsPerRun(200, func() {
		pr.now = pr.now.Add(10 * time.Millisecond)
		got += 64 << 10 / 100 // 64 KiB/s: in time, judged at every call once a window passed
		if pr.c.s.DataProgress(pr.now, 1, got) {
			t.Fatal("failed a load that finishes in time")
		}
	})
	if allocs != 0 {
		t.Fatalf("DataProgress allocates %.1f times per call", allocs)
	}
}
