package loads_test

import (
	"testing"

	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/sim"
)

// TestProducerGone (issue 23): the producer's engine goes while a
// decoder's PD fetch waits at it for a request the engine never registered
// (decoder first), or registered without storing yet. The fetch fails with
// no time passing (one round trip), not at the decoder's PD load timeout;
// while no engine is back a new fetch is refused the same way, and so is a
// fetch for the gone engine's ids after a new engine attached. A fetch for
// an id the new engine may still register waits for it, as before.
func TestProducerGone(t *testing.T) {
	for _, registered := range []bool{false, true} {
		name := map[bool]string{false: "unregistered", true: "registered"}[registered]
		t.Run(name, func(t *testing.T) {
			f := newFleet(t)
			p := f.node("10.0.0.1:7777", sim.NodeOpts{})
			c := f.node("10.0.0.2:7777", sim.NodeOpts{})
			ks := nodetest.Keys("gone", 4)
			if registered {
				p.T.NewRequest(f.net.Now, "p1", decoder("kv1"))
			}
			c.T.NewRequest(f.net.Now, "d1", pd("kv1", "10.0.0.1", 7777))
			c.T.NewRequest(f.net.Now, "d2", pd("kv2", "10.0.0.1", 7777))
			f.net.Run()
			lj := c.T.SubmitLoad(f.net.Now, "d1", ks)
			f.noResult(c, lj) // the fetch waits at p for stores
			if n := p.T.View(f.net.Now).Fetches; n != 1 {
				t.Fatalf("fetches bound at p: %d, want 1", n)
			}

			if n := p.T.ProducerGone(f.net.Now); n != 1 {
				t.Fatalf("ProducerGone failed %d fetches, want 1", n)
			}
			if registered {
				p.T.RequestFinished(f.net.Now, "p1") // as the sidecar's detach does
			}
			if r := f.mustResult(c, lj); r.OK { // no time passes: one round trip
				t.Fatalf("load from a gone producer: %+v", r)
			}
			if n := p.T.View(f.net.Now).Fetches; n != 0 {
				t.Fatalf("fetches bound at p after its engine went: %d", n)
			}
			// No engine: a new fetch is refused at once.
			lj2 := c.T.SubmitLoad(f.net.Now, "d2", ks)
			if r := f.mustResult(c, lj2); r.OK {
				t.Fatalf("load while no engine is attached: %+v", r)
			}

			// A new engine: a fetch for the old engine's id is refused; one
			// for an id it registers later waits and is served.
			p.T.ProducerBack()
			c.T.RequestFinished(f.net.Now, "d1")
			c.T.NewRequest(f.net.Now, "d1again", pd("kv1", "10.0.0.1", 7777))
			c.T.NewRequest(f.net.Now, "d3", pd("kv3", "10.0.0.1", 7777))
			f.net.Run()
			if r := f.mustResult(c, c.T.SubmitLoad(f.net.Now, "d1again", ks)); r.OK {
				t.Fatalf("fetch for the gone engine's id: %+v", r)
			}
			lj3 := c.T.SubmitLoad(f.net.Now, "d3", ks)
			f.noResult(c, lj3)
			p.T.NewRequest(f.net.Now, "p3", decoder("kv3"))
			f.put(p, ks)
			sj := p.T.SubmitStore(f.net.Now, "p3", ks)
			if r := f.mustResult(c, lj3); !r.OK {
				t.Fatalf("load from the new engine: %+v", r)
			}
			if r := f.mustResult(p, sj); !r.OK {
				t.Fatalf("store of the new engine: %+v", r)
			}
			f.verify(c, ks)
			for _, id := range []string{"d2", "d1again", "d3"} {
				c.T.RequestFinished(f.net.Now, id)
			}
			p.T.RequestFinished(f.net.Now, "p3")
			f.net.Run()
			f.settled(c)
			f.settled(p)
		})
	}
}
