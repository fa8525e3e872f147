package loads_test

import (
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/sim"
)

func TestMain(m *testing.M) { goleakMain(m) }

// PD, prefiller first: the producer stores before the decoder fetches.
func TestPDPrefillerFirst(t *testing.T) {
	f := newFleet(t)
	p := f.node("10.0.0.1:7777", sim.NodeOpts{})
	c := f.node("10.0.0.2:7777", sim.NodeOpts{})
	ks := keys("a", 8)
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
	ks := keys("a", 8)
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
	ks := keys("a", 6)
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
