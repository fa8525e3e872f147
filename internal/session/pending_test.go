package session

import (
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/nodetest/testkeys"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// parkedPair is a quiet pair (no heartbeat deadline) whose producer parks
// a lookup of key k, for request "kv": k is pending there (its engine was
// asked) for up to hold.
func parkedPair(t *testing.T, hold time.Duration, mod func(c *Config)) (*pair, wire.Key) {
	t.Helper()
	pr := readyPair(t, func(c, p *Config) {
		c.HeartbeatTimeout, p.HeartbeatTimeout = time.Hour, time.Hour
		p.LookupPendingTimeout = hold
		if mod != nil {
			mod(c)
		}
	})
	k := testkeys.Key("starved", 0)
	pr.p.blocks.pending[k] = true
	if v := pr.lookup("kv", []wire.Key{k}); v[0] != Retry {
		t.Fatalf("parked lookup answered: %v", v)
	}
	return pr, k
}

func always(wire.Key) bool { return true }

// sayPending makes the producer say its parked lookups are pending and
// delivers what it sent.
func (pr *pair) sayPending() int {
	pr.t.Helper()
	n := pr.p.s.SayPending(pr.now, always)
	pr.flush()
	return n
}

// verdict is the consumer's verdict on k for "kv" now.
func (pr *pair) verdict(k wire.Key) Verdict { return pr.c.s.RegisterLookup("kv", k) }

// TestLookupPendingRearms: a LookupPending re-arms the consumer's lookup
// deadline to LookupTimeout (2 s) after it arrived, as a LookupResp would;
// the producer's answer then ends the wait, HIT.
func TestLookupPendingRearms(t *testing.T) {
	pr, k := parkedPair(t, time.Minute, nil)
	pr.advance(1500 * time.Millisecond)
	if n := pr.sayPending(); n != 1 {
		t.Fatalf("SayPending sent %d, want 1", n)
	}
	pr.advance(1990 * time.Millisecond) // 3.49 s from the lookup, past its unheld 2 s
	if v := pr.verdict(k); v != Retry {
		t.Fatalf("%v: want RETRY within LookupTimeout of the pending answer", v)
	}
	pr.advance(10 * time.Millisecond)
	if v := pr.verdict(k); v != Miss {
		t.Fatalf("%v: want MISS LookupTimeout after the pending answer", v)
	}

	// Again, and this time the engine answers within the grace: HIT.
	pr2, k2 := parkedPair(t, time.Minute, nil)
	pr2.advance(1500 * time.Millisecond)
	pr2.sayPending()
	pr2.advance(time.Second)
	pr2.p.blocks.add(k2) // the engine granted it
	pr2.advance(10 * time.Millisecond)
	if v := pr2.verdict(k2); v != Hit {
		t.Fatalf("%v: want HIT once the producer answers", v)
	}
	if pr2.c.ended != health.CauseNone || pr2.c.s.PendingIgnored() != 0 {
		t.Fatalf("ended %v, ignored %d", pr2.c.ended, pr2.c.s.PendingIgnored())
	}
}

// TestLookupPendingCap: however often the producer says pending, a held
// lookup reads MISS HoldFactor LookupTimeouts (8 s) after it was sent,
// even while the peer's answers to other lookups keep the session's
// silence deadline away.
func TestLookupPendingCap(t *testing.T) {
	pr, k := parkedPair(t, time.Minute, nil)
	start := pr.now
	limit := HoldFactor * pr.cfg.LookupTimeout
	for pr.now.Sub(start)+500*time.Millisecond < limit-100*time.Millisecond {
		pr.advance(500 * time.Millisecond)
		pr.sayPending()
		// Another request's lookup, answered at once: a live peer.
		other := testkeys.Key("other", int(pr.now.Sub(start)/time.Millisecond))
		pr.p.blocks.add(other)
		allHit(t, pr.lookup("kv-other", []wire.Key{other}))
		if v := pr.verdict(k); v != Retry {
			t.Fatalf("%v after %v: want RETRY within the cap", v, pr.now.Sub(start))
		}
	}
	pr.advance(start.Add(limit).Sub(pr.now) - 10*time.Millisecond)
	if v := pr.verdict(k); v != Retry {
		t.Fatalf("%v 10 ms before the cap: want RETRY", v)
	}
	pr.advance(10 * time.Millisecond)
	if v := pr.verdict(k); v != Miss {
		t.Fatalf("%v at the cap (%v): want MISS", v, pr.now.Sub(start))
	}
	// The answer that comes after changes nothing, and the session lives.
	pr.p.blocks.add(k)
	pr.advance(20 * time.Millisecond)
	if v := pr.verdict(k); v != Miss {
		t.Fatalf("%v after a late answer: want MISS", v)
	}
	if pr.c.ended != health.CauseNone {
		t.Fatalf("the cap ended the session: %v", pr.c.ended)
	}
}

// TestLookupPendingCapAlone: with nothing else on the session, repeated
// pending answers re-arm the silence deadline no further than the cap.
func TestLookupPendingCapAlone(t *testing.T) {
	pr, k := parkedPair(t, time.Minute, nil)
	start := pr.now
	limit := HoldFactor * pr.cfg.LookupTimeout
	for pr.now.Sub(start) < limit-10*time.Millisecond {
		pr.advance(10 * time.Millisecond)
		pr.sayPending()
	}
	if v := pr.verdict(k); v != Retry {
		t.Fatalf("%v before the cap: want RETRY", v)
	}
	pr.advance(10 * time.Millisecond)
	if v := pr.verdict(k); v != Miss {
		t.Fatalf("%v at the cap: want MISS", v)
	}
}

// TestLookupPendingIgnored: a LookupPending for no outstanding lookup (an
// unknown request, one answered already) or with LookupTimeout off is
// counted and changes nothing; it is not a protocol error.
func TestLookupPendingIgnored(t *testing.T) {
	pr, k := parkedPair(t, time.Minute, nil)
	pr.c.s.Receive(pr.now, &wire.LookupPending{ReqID: "nobody", Round: 1})
	pr.c.s.Receive(pr.now, &wire.LookupPending{ReqID: "kv", Round: 99})
	if got := pr.c.s.PendingIgnored(); got != 2 {
		t.Fatalf("ignored %d, want 2", got)
	}
	pr.advance(2 * time.Second)
	if v := pr.verdict(k); v != Miss {
		t.Fatalf("%v: an ignored LookupPending re-armed the deadline", v)
	}
	if pr.c.ended != health.CauseNone {
		t.Fatalf("ended %v", pr.c.ended)
	}
	// Answered already: the late pending answer is ignored too.
	pr.c.s.Receive(pr.now, &wire.LookupPending{ReqID: "kv", Round: 1})
	if got := pr.c.s.PendingIgnored(); got != 3 {
		t.Fatalf("ignored %d, want 3", got)
	}

	// LookupTimeout 0 (the vLLM presets): nothing to re-arm or cap; the
	// lookup waits for its answer as before.
	off, k2 := parkedPair(t, time.Minute, func(c *Config) { c.LookupTimeout = 0 })
	off.advance(time.Second)
	off.sayPending()
	if got := off.c.s.PendingIgnored(); got != 1 {
		t.Fatalf("ignored %d with LookupTimeout 0, want 1", got)
	}
	off.advance(20 * time.Second)
	if v := off.verdict(k2); v != Retry {
		t.Fatalf("%v with LookupTimeout 0: want RETRY until the producer answers", v)
	}
}

// TestSayPendingOnlyParkedOnWaitingKeys: the producer says pending only
// for lookups parked on a key the caller names, once per call each.
func TestSayPendingOnlyParkedOnWaitingKeys(t *testing.T) {
	pr := quiet(t)
	a, b := testkeys.Key("a", 0), testkeys.Key("b", 0)
	pr.p.blocks.pending[a], pr.p.blocks.pending[b] = true, true
	pr.lookup("ra", []wire.Key{a})
	pr.lookup("rb", []wire.Key{b})
	held := testkeys.Key("held", 0)
	pr.p.blocks.add(held)
	allHit(t, pr.lookup("rc", []wire.Key{held}))
	if n := pr.p.s.SayPending(pr.now, func(k wire.Key) bool { return k == a }); n != 1 {
		t.Fatalf("sent %d, want 1", n)
	}
	pr.flush()
	got := sentOf[*wire.LookupPending](pr.p)
	if len(got) != 1 || got[0].ReqID != "ra" || got[0].Round == 0 {
		t.Fatalf("sent %+v, want one for ra", got)
	}
	if pr.c.s.PendingIgnored() != 0 {
		t.Fatal("the consumer ignored a pending answer for its outstanding lookup")
	}
}
