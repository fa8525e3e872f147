package loads_test

import (
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/sim"
)

// TestSymmetricSplitLoads is issue 23 through the table, real sessions and
// the simulated data path: vLLM promotes one request's 13 confirmed hits
// as two load jobs (7+6 in one step; 12+1 with the second a step later,
// after the first landed). Both load, with the right bytes, and the
// request's end leaves no pin on either side.
func TestSymmetricSplitLoads(t *testing.T) {
	for _, tc := range []struct {
		name     string
		split    int
		sameStep bool
	}{{"7+6 same step", 7, true}, {"12+1 later step", 12, false}, {"1+12 later step", 1, false}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t)
			p := f.node("10.0.0.1:7777", sim.NodeOpts{})
			c := f.node("10.0.0.2:7777", sim.NodeOpts{})
			ks := nodetest.Keys("a", 13)
			f.put(p, ks)
			c.T.NewRequest(f.net.Now, "r", sym("kv", "10.0.0.1", 7777))
			f.net.Run()
			for _, k := range ks {
				c.T.Lookup(f.net.Now, "r", k)
			}
			c.T.EndStep(f.net.Now)
			f.net.Run()
			for i, k := range ks {
				if v := c.T.Lookup(f.net.Now, "r", k); v != session.Hit {
					t.Fatalf("lookup %d = %v, want HIT", i, v)
				}
			}
			j1 := c.T.SubmitLoad(f.net.Now, "r", ks[:tc.split])
			if !tc.sameStep {
				if r := f.mustResult(c, j1); !r.OK {
					t.Fatalf("job 1: %+v", r)
				}
				f.net.Advance(50 * time.Millisecond)
			}
			j2 := c.T.SubmitLoad(f.net.Now, "r", ks[tc.split:])
			for _, j := range []uint64{j1, j2} {
				if j == j1 && !tc.sameStep {
					continue
				}
				if r := f.mustResult(c, j); !r.OK {
					t.Fatalf("job %d: %+v", j, r)
				}
			}
			f.verify(c, ks)
			c.T.RequestFinished(f.net.Now, "r")
			f.net.Run()
			if n := p.Store.Stats().Pinned; n != 0 {
				t.Fatalf("producer pins %d after the request's end", n)
			}
			f.settled(c)
			f.settled(p)
		})
	}
}
