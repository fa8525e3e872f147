package loads_test

import (
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/sim"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// starvedEngine is a producer's Resolver whose engine was asked for keys
// and has not answered: they stay pending until answered.
type starvedEngine struct{ asked map[wire.Key]bool }

func (e *starvedEngine) Pending(_ uint64, k wire.Key) bool { return e.asked[k] }

// pendingFleet: consumer c (kvp2p's timers: lookup_timeout 1 s) looks key
// k up at producer p, whose engine was asked for it and is starved.
func pendingFleet(t *testing.T) (*fleet, *sim.Node, *sim.Node, *starvedEngine, *recorder, wire.Key) {
	t.Helper()
	f := newFleet(t)
	k := nodetest.Key("starved", 0)
	eng := &starvedEngine{asked: map[wire.Key]bool{k: true}}
	tm := loads.KVP2PTimers()
	p := f.node("10.0.0.1:7000", sim.NodeOpts{Policy: health.Domain, Timers: &tm, Resolver: eng})
	rec := &recorder{}
	c := f.node("10.0.0.2:7000", sim.NodeOpts{Policy: health.Domain, Timers: &tm, Observer: rec})
	if err := c.T.NewRequest(f.net.Now, "r", sym("kv", "10.0.0.1", 7000)); err != nil {
		t.Fatal(err)
	}
	// The first lookup dials; the next, once the session is ready, sends
	// the Lookup, which parks at the producer.
	for range 2 {
		if v := c.T.Lookup(f.net.Now, "r", k); v != session.Retry {
			t.Fatalf("lookup: %v, want RETRY", v)
		}
		c.T.EndStep(f.net.Now)
		f.net.Run()
	}
	return f, p, c, eng, rec, k
}

// lookupAt advances the fleet to d after start and looks k up.
func lookupAt(f *fleet, c *sim.Node, start time.Time, d time.Duration, k wire.Key) session.Verdict {
	f.t.Helper()
	if w := start.Add(d).Sub(f.net.Now); w > 0 {
		f.net.Advance(w)
	}
	return c.T.Lookup(f.net.Now, "r", k)
}

// The producer says "still pending" at 0.9 s and 1.8 s: the consumer's
// lookup outlives its lookup_timeout (1 s) and is a HIT when the engine
// answers at 2.5 s.
func TestTableLookupPendingThenHit(t *testing.T) {
	f, p, c, eng, rec, k := pendingFleet(t)
	start := f.net.Now
	for _, at := range []time.Duration{900 * time.Millisecond, 1800 * time.Millisecond} {
		if v := lookupAt(f, c, start, at, k); v != session.Retry {
			t.Fatalf("at %v: %v, want RETRY", at, v)
		}
		if n := p.T.SayLookupsPending(f.net.Now, func(x wire.Key) bool { return x == k }); n != 1 {
			t.Fatalf("told %d lookups, want 1", n)
		}
		f.net.Run()
	}
	if v := lookupAt(f, c, start, 2500*time.Millisecond, k); v != session.Retry {
		t.Fatalf("at 2.5 s: %v, want RETRY (lookup_timeout re-armed at 1.8 s)", v)
	}
	f.put(p, []wire.Key{k}) // the engine answered: it holds k
	delete(eng.asked, k)
	f.net.Advance(10 * time.Millisecond)
	if v := c.T.Lookup(f.net.Now, "r", k); v != session.Hit {
		t.Fatalf("after the engine answered: %v, want HIT\n%s", v, tail(f.log.String()))
	}
	if strings.Contains(rec.b.String(), "pending ignored") {
		t.Fatalf("the consumer ignored a pending answer:\n%s", rec.b.String())
	}
}

// A producer that says "pending" forever holds the consumer's request at
// most session.HoldFactor lookup_timeouts from the lookup's start; without
// it the request falls back at lookup_timeout.
func TestTableLookupPendingCapAndWithout(t *testing.T) {
	f, p, c, _, _, k := pendingFleet(t)
	start := f.net.Now
	limit := session.HoldFactor * loads.KVP2PTimers().LookupTimeout
	for at := 500 * time.Millisecond; at < limit; at += 500 * time.Millisecond {
		if v := lookupAt(f, c, start, at, k); v != session.Retry {
			t.Fatalf("at %v: %v, want RETRY within the cap", at, v)
		}
		p.T.SayLookupsPending(f.net.Now, func(wire.Key) bool { return true })
		f.net.Run()
	}
	if v := lookupAt(f, c, start, limit, k); v != session.Miss {
		t.Fatalf("at the cap (%v): %v, want MISS", limit, v)
	}

	// The same starved producer, silent: MISS at lookup_timeout.
	f2, _, c2, _, _, k2 := pendingFleet(t)
	start2 := f2.net.Now
	if v := lookupAt(f2, c2, start2, 990*time.Millisecond, k2); v != session.Retry {
		t.Fatalf("before lookup_timeout: %v", v)
	}
	if v := lookupAt(f2, c2, start2, time.Second, k2); v != session.Miss {
		t.Fatalf("at lookup_timeout with no pending answer: %v, want MISS", v)
	}
}

// A LookupPending for a lookup the consumer no longer waits on (its
// request finished while the producer's "pending" was on its way) is
// counted (the table's observer hears it) and changes nothing.
func TestTableLookupPendingIgnored(t *testing.T) {
	f, p, c, _, rec, k := pendingFleet(t)
	f.net.Advance(500 * time.Millisecond)
	c.T.RequestFinished(f.net.Now, "r")
	if n := p.T.SayLookupsPending(f.net.Now, func(x wire.Key) bool { return x == k }); n != 1 {
		t.Fatalf("told %d lookups, want 1", n)
	}
	f.net.Run()
	if got := strings.Count(rec.b.String(), "pending ignored"); got != 1 {
		t.Fatalf("observer heard %d ignored, want 1:\n%s", got, rec.b.String())
	}
	// The session lives on: a new request's lookup is answered.
	held := nodetest.Key("held", 0)
	f.put(p, []wire.Key{held})
	if err := c.T.NewRequest(f.net.Now, "r2", sym("kv2", "10.0.0.1", 7000)); err != nil {
		t.Fatal(err)
	}
	c.T.Lookup(f.net.Now, "r2", held)
	c.T.EndStep(f.net.Now)
	f.net.Advance(10 * time.Millisecond)
	if v := c.T.Lookup(f.net.Now, "r2", held); v != session.Hit {
		t.Fatalf("after an ignored pending answer: %v, want HIT\n%s", v, tail(f.log.String()))
	}
}
