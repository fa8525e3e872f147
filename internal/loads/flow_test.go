package loads_test

import (
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/sim"
	"github.com/kvp2p/kvp2p/internal/wire"
)

func TestMain(m *testing.M) { goleakMain(m) }

// PD, prefiller first: the producer stores before the decoder fetches.
func TestPDPrefillerFirst(t *testing.T) {
	f := newFleet(t)
	p := f.node("10.0.0.1:7777", sim.NodeOpts{})
	c := f.node("10.0.0.2:7777", sim.NodeOpts{})
	ks := nodetest.Keys("a", 8)
	f.put(p, ks)
	now := f.net.Now
	if err := p.T.NewRequest(now, "p1", decoder("kv1")); err != nil {
		t.Fatal(err)
	}
	sj := p.T.SubmitStore(now, "p1", ks)
	f.noResult(p, sj) // parked, unbound
	if err := c.T.NewRequest(now, "d1", pd("kv1", "10.0.0.1", 7777)); err != nil {
		t.Fatal(err)
	}
	f.net.Run()
	if v := c.T.Lookup(f.net.Now, "d1", ks[0]); v != session.Hit {
		t.Fatalf("PD lookup = %v, want HIT", v)
	}
	lj := c.T.SubmitLoad(f.net.Now, "d1", ks)
	if r := f.mustResult(c, lj); !r.OK || r.Bytes != 8*blockBytes {
		t.Fatalf("load: %+v", r)
	}
	if r := f.mustResult(p, sj); !r.OK {
		t.Fatalf("store: %+v", r)
	}
	f.verify(c, ks)
	c.T.RequestFinished(f.net.Now, "d1")
	p.T.RequestFinished(f.net.Now, "p1")
	f.net.Run()
	f.settled(c)
	f.settled(p)
}

// PD, decoder first: the fetch parks until the stores land, batch by batch.
func TestPDDecoderFirst(t *testing.T) {
	f := newFleet(t)
	p := f.node("10.0.0.1:7777", sim.NodeOpts{})
	c := f.node("10.0.0.2:7777", sim.NodeOpts{})
	ks := nodetest.Keys("a", 8)
	c.T.NewRequest(f.net.Now, "d1", pd("kv1", "10.0.0.1", 7777))
	p.T.NewRequest(f.net.Now, "p1", decoder("kv1"))
	f.net.Run()
	lj := c.T.SubmitLoad(f.net.Now, "d1", ks)
	f.net.Advance(time.Second)
	f.noResult(c, lj)
	f.put(p, ks[:4])
	s1 := p.T.SubmitStore(f.net.Now, "p1", ks[:4])
	f.net.Run()
	f.noResult(c, lj)
	f.put(p, ks[4:])
	s2 := p.T.SubmitStore(f.net.Now, "p1", ks[4:])
	if r := f.mustResult(c, lj); !r.OK {
		t.Fatalf("load: %+v", r)
	}
	for _, j := range []uint64{s1, s2} {
		if r := f.mustResult(p, j); !r.OK {
			t.Fatalf("store %d: %+v", j, r)
		}
	}
	f.verify(c, ks)
	f.settled(c)
	f.settled(p)
}

// Symmetric: lookup RETRY, flush, HIT/MISS, load the hits.
func TestSymmetricLookupThenLoad(t *testing.T) {
	f := newFleet(t)
	p := f.node("10.0.0.1:7777", sim.NodeOpts{})
	c := f.node("10.0.0.2:7777", sim.NodeOpts{})
	ks := nodetest.Keys("a", 6)
	f.put(p, ks[:4])
	c.T.NewRequest(f.net.Now, "r1", sym("kv1", "10.0.0.1", 7777))
	f.net.Run()
	for _, k := range ks {
		if v := c.T.Lookup(f.net.Now, "r1", k); v != session.Retry {
			t.Fatalf("first lookup = %v, want RETRY", v)
		}
	}
	c.T.EndStep(f.net.Now)
	f.net.Run()
	for i, k := range ks {
		want := session.Hit
		if i >= 4 {
			want = session.Miss
		}
		if v := c.T.Lookup(f.net.Now, "r1", k); v != want {
			t.Fatalf("lookup %d = %v, want %v", i, v, want)
		}
	}
	if p.Store.Stats().Pinned != 4 {
		t.Fatalf("producer pinned %d, want 4 (lookup pins)", p.Store.Stats().Pinned)
	}
	lj := c.T.SubmitLoad(f.net.Now, "r1", ks[:4])
	if r := f.mustResult(c, lj); !r.OK {
		t.Fatalf("load: %+v", r)
	}
	f.verify(c, ks[:4])
	c.T.RequestFinished(f.net.Now, "r1")
	f.net.Run()
	f.settled(c)
	f.settled(p)
}

// PD, prefiller first, and the producer's request finishes before the
// decoder's fetch arrives: the parked stores still serve it.
func TestPDPrefillerFinishesBeforeFetchStillServes(t *testing.T) {
	f := newFleet(t)
	p := f.node("10.0.0.1:7777", sim.NodeOpts{})
	c := f.node("10.0.0.2:7777", sim.NodeOpts{})
	ks := nodetest.Keys("a", 4)
	f.put(p, ks)
	p.T.NewRequest(f.net.Now, "p1", decoder("kv1"))
	sj := p.T.SubmitStore(f.net.Now, "p1", ks)
	p.T.RequestFinished(f.net.Now, "p1")
	f.net.Advance(5 * time.Second)
	f.noResult(p, sj)
	c.T.NewRequest(f.net.Now, "d1", pd("kv1", "10.0.0.1", 7777))
	f.net.Run()
	lj := c.T.SubmitLoad(f.net.Now, "d1", ks)
	if r := f.mustResult(c, lj); !r.OK {
		t.Fatalf("load: %+v", r)
	}
	if r := f.mustResult(p, sj); !r.OK {
		t.Fatalf("store: %+v", r)
	}
	f.verify(c, ks)
	c.T.RequestFinished(f.net.Now, "d1")
	f.net.Run()
	f.settled(p)
	f.settled(c)
}

// A symmetric consumer finishing with a load in flight and the next
// round's lookup open releases the open round's pins on the producer at
// once (terminal empty fetch), not at the producer's store timeout.
func TestSymmetricFinishReleasesOpenLookupPins(t *testing.T) {
	f := newFleet(t)
	p := f.node("10.0.0.1:7777", sim.NodeOpts{})
	c := f.node("10.0.0.2:7777", sim.NodeOpts{})
	a, b := nodetest.Keys("a", 2), nodetest.Keys("b", 1)
	f.put(p, append(append([]wire.Key{}, a...), b...))
	c.T.NewRequest(f.net.Now, "r", sym("kv", "10.0.0.1", 7777))
	f.net.Run()
	lookupAll := func(ks []wire.Key) {
		for _, k := range ks {
			c.T.Lookup(f.net.Now, "r", k)
		}
		c.T.EndStep(f.net.Now)
		f.net.Run()
		for _, k := range ks {
			if v := c.T.Lookup(f.net.Now, "r", k); v != session.Hit {
				t.Fatalf("lookup %v", v)
			}
		}
	}
	lookupAll(a)
	// The load stays in flight: its producer sends a byte a second. (A
	// blackhole no longer does it: the writer hands its bytes to the
	// kernel, which holds them, and unpins: sim/hold.go.)
	p.SlowBps = 1
	j := c.T.SubmitLoad(f.net.Now, "r", a)
	f.net.Run()
	lookupAll(b)
	if n := p.Store.Stats().Pinned; n != 3 {
		t.Fatalf("producer pins %d, want 3", n)
	}
	c.T.RequestFinished(f.net.Now, "r")
	f.net.Run()
	if r := f.mustResult(c, j); r.OK {
		t.Fatal("finished request's load OK")
	}
	if n := p.Store.Stats().Pinned; n != 2 {
		t.Fatalf("producer pins %d after the finish, want 2 (only the aborting round's)", n)
	}
}
