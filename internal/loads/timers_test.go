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

// TestUnboundStoreReaped pins vLLM #53453: a PD store no fetch binds fails
// at UnboundStoreTimeout (once, pins dropped); a later submit_store for the
// id short-circuits; a late fetch is refused within one round trip instead
// of burning the consumer's load timeout.
func TestUnboundStoreReaped(t *testing.T) {
	f := newFleet(t)
	p := f.node("10.0.0.1:7777", sim.NodeOpts{})
	c := f.node("10.0.0.2:7777", sim.NodeOpts{})
	ks := nodetest.Keys("a", 4)
	f.put(p, ks)
	p.T.NewRequest(f.net.Now, "p1", decoder("kv1"))
	sj := p.T.SubmitStore(f.net.Now, "p1", ks)
	f.net.Advance(60*time.Second - 10*time.Millisecond)
	f.noResult(p, sj)
	if p.Store.Stats().Pinned != 4 {
		t.Fatal("parked store not pinned")
	}
	f.net.Advance(10 * time.Millisecond)
	if r := f.mustResult(p, sj); r.OK {
		t.Fatal("unbound store reported OK")
	}
	f.settled(p)
	again := p.T.SubmitStore(f.net.Now, "p1", ks)
	if r := f.mustResult(p, again); r.OK || !strings.Contains(r.Reason, "reaped") {
		t.Fatalf("submit_store on a reaped id: %+v", r)
	}
	f.settled(p)
	// The decoder arrives late.
	c.T.NewRequest(f.net.Now, "d1", pd("kv1", "10.0.0.1", 7777))
	f.net.Run()
	lj := c.T.SubmitLoad(f.net.Now, "d1", ks)
	r := f.mustResult(c, lj) // no time passes: one round trip
	if r.OK {
		t.Fatal("late fetch for a reaped store succeeded")
	}
	if !strings.Contains(f.log.String(), "late fetch for a reaped store") {
		t.Fatal("no late-fetch log line")
	}
	for _, n := range []*sim.Node{p, c} {
		if _, dup := result(n, sj); dup {
			t.Fatal("second store result")
		}
	}
	f.settled(p)
	f.settled(c)
}

// TestLoadTimeoutPerModeAndPreset: a load whose producer never answers
// fails at 10 s (symmetric) or 30 s (PD) in both the kvp2p and the vLLM
// presets, not a tick before.
func TestLoadTimeoutPerModeAndPreset(t *testing.T) {
	for _, preset := range []string{"kvp2p", health.PerPeer} {
		for _, mode := range []string{"symmetric", "pd"} {
			t.Run(preset+"/"+mode, func(t *testing.T) {
				tm := loads.PresetTimers(preset)
				want := map[string]time.Duration{"symmetric": 10 * time.Second, "pd": 30 * time.Second}[mode]
				if got := map[string]time.Duration{"symmetric": tm.LoadTimeoutSymmetric, "pd": tm.LoadTimeoutPD}[mode]; got != want {
					t.Fatalf("preset load timeout %v, want %v", got, want)
				}
				tm.StallTimeout = 0 // the sim sends no periodic Progress frames
				f := newFleet(t)
				p := f.node("10.0.0.1:7777", sim.NodeOpts{Timers: &tm})
				c := f.node("10.0.0.2:7777", sim.NodeOpts{Timers: &tm})
				ks := nodetest.Keys("a", 2)
				params := pd("kv", "10.0.0.1", 7777)
				if mode == "symmetric" {
					params = sym("kv", "10.0.0.1", 7777)
					f.put(p, ks)
				}
				c.T.NewRequest(f.net.Now, "r", params)
				f.net.Run()
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
				p.DataBlackhole = true // symmetric: the bytes never come
				j := c.T.SubmitLoad(f.net.Now, "r", ks)
				f.net.Advance(want - 10*time.Millisecond)
				f.noResult(c, j)
				f.net.Advance(10 * time.Millisecond)
				if r := f.mustResult(c, j); r.OK || r.Reason != "load timed out" {
					t.Fatalf("%+v", r)
				}
			})
		}
	}
}

// TestFailedLoadSlotsHeldUntilQuiet: a timed-out load is reported at once,
// but its destination slots stay reserved while anything may still write
// into them; when the producer's writer cannot be proven stopped, the
// session ends and its DataClosed frees them.
func TestFailedLoadSlotsHeldUntilQuiet(t *testing.T) {
	f := newFleet(t)
	p := f.node("10.0.0.1:7777", sim.NodeOpts{})
	c := f.node("10.0.0.2:7777", sim.NodeOpts{})
	ks := nodetest.Keys("a", 2)
	f.put(p, ks)
	c.T.NewRequest(f.net.Now, "r", sym("kv", "10.0.0.1", 7777))
	f.net.Run()
	for _, k := range ks {
		c.T.Lookup(f.net.Now, "r", k)
	}
	c.T.EndStep(f.net.Now)
	f.net.Run()
	p.DataBlackhole = true // neither the bytes nor the cancel get through
	j := c.T.SubmitLoad(f.net.Now, "r", ks)
	f.net.Advance(10 * time.Second)
	if r := f.mustResult(c, j); r.OK {
		t.Fatal("load OK")
	}
	if n := c.Store.Stats().Filling; n != 2 {
		t.Fatalf("%d slots filling right after the failure, want 2 (the writer may still write)", n)
	}
	f.net.Advance(10*time.Second - 20*time.Millisecond) // AbortAckTimeout (vLLM: 10 s)
	if n := c.Store.Stats().Filling; n != 2 {
		t.Fatalf("%d slots filling before the abort was settled, want 2", n)
	}
	f.net.Advance(30 * time.Millisecond)
	f.settled(c)
	f.settled(p)
}

// TestShutdownDrainsThenSaysGoodbye: transfers in flight get ShutdownDrain
// to finish; what finished is reported OK, what could not fails, every job
// has exactly one result, and the node ends drained with no slot held.
func TestShutdownDrainsThenSaysGoodbye(t *testing.T) {
	for _, tc := range []struct {
		name     string
		complete bool // the rest of the blocks arrive during the drain
	}{{"transfer completes during the drain", true}, {"drain times out", false}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t)
			p := f.node("10.0.0.1:7777", sim.NodeOpts{})
			c := f.node("10.0.0.2:7777", sim.NodeOpts{})
			ks := nodetest.Keys("a", 4)
			p.T.NewRequest(f.net.Now, "p1", decoder("kv1"))
			c.T.NewRequest(f.net.Now, "d1", pd("kv1", "10.0.0.1", 7777))
			f.net.Run()
			lj := c.T.SubmitLoad(f.net.Now, "d1", ks)
			f.put(p, ks[:2])
			s1 := p.T.SubmitStore(f.net.Now, "p1", ks[:2])
			f.net.Run()
			p.T.Shutdown(f.net.Now)
			f.net.Advance(time.Second)
			if p.T.Drained() {
				t.Fatal("shut down with a transfer in flight")
			}
			var s2 uint64
			if tc.complete {
				f.put(p, ks[2:])
				s2 = p.T.SubmitStore(f.net.Now, "p1", ks[2:])
				f.net.Run()
				if r := f.mustResult(c, lj); !r.OK {
					t.Fatalf("load finished during the drain: %+v", r)
				}
				f.verify(c, ks)
			}
			f.net.Advance(3 * time.Second)
			if !p.T.Drained() {
				t.Fatal("not drained after ShutdownDrain")
			}
			// (The consumer sees conn-reset, not goodbye: sim.Net.close drops
			// the Goodbye queued before the close. TestShutdownSaysGoodbye
			// checks the producer's actions directly.)
			if !tc.complete {
				if r := f.mustResult(c, lj); r.OK {
					t.Fatal("load OK although its source shut down")
				}
			}
			for _, j := range []uint64{s1, s2} {
				if j == 0 {
					continue
				}
				if r := f.mustResult(p, j); r.OK != tc.complete {
					t.Fatalf("store %d: %+v", j, r)
				}
			}
			for _, n := range []*sim.Node{p, c} {
				if len(n.Results) != 0 {
					t.Fatalf("%s: extra results %+v", n.ID, n.Results)
				}
				f.settled(n)
			}
		})
	}
}

// TestShutdownSaysGoodbye: once drained, shutdown sends Goodbye(shutdown)
// on every session before closing it, and refuses new sessions.
func TestShutdownSaysGoodbye(t *testing.T) {
	f := newFleet(t)
	p := f.node("10.0.0.1:7777", sim.NodeOpts{})
	c := f.node("10.0.0.2:7777", sim.NodeOpts{})
	f.connect(c, "10.0.0.1", 7777)
	p.T.Shutdown(f.net.Now) // nothing in flight: goodbye at once
	acts := p.T.TakeEffects().Actions
	bye, closed := -1, -1
	for i, a := range acts {
		if g, ok := a.Msg.(*wire.Goodbye); a.Kind == loads.ActSend && ok && g.Reason == wire.GoodbyeShutdown {
			bye = i
		}
		if a.Kind == loads.ActClose && a.Cause == health.CauseGoodbye {
			closed = i
		}
	}
	if bye < 0 || closed < bye {
		t.Fatalf("want Goodbye(shutdown) then close, got %+v", acts)
	}
	p.T.Accept(f.net.Now)
	refused := false
	for _, a := range p.T.TakeEffects().Actions {
		refused = refused || a.Kind == loads.ActClose
		if _, hello := a.Msg.(*wire.Hello); hello {
			t.Fatal("inbound connection greeted while shutting down")
		}
	}
	if !refused {
		t.Fatal("inbound connection not closed while shutting down")
	}
	// New work fails at once instead of waiting for timers that no longer
	// run for it (a parked store would hold its pins for the unbound-store
	// timeout).
	p.T.NewRequest(f.net.Now, "late", decoder("kv-late"))
	ks := nodetest.Keys("late", 1)
	f.put(p, ks)
	sj := p.T.SubmitStore(f.net.Now, "late", ks)
	c.T.Shutdown(f.net.Now)
	c.T.NewRequest(f.net.Now, "late-load", pd("kv-ll", "10.0.0.1", 7777))
	lj := c.T.SubmitLoad(f.net.Now, "late-load", nodetest.Keys("ll", 1))
	for _, x := range []struct {
		n *sim.Node
		j uint64
	}{{p, sj}, {c, lj}} {
		rs := x.n.T.TakeEffects().Results
		if len(rs) != 1 || rs[0].Job != x.j || rs[0].OK {
			t.Fatalf("%s: results %+v, want job %d failed at once", x.n.ID, rs, x.j)
		}
	}
	if st := p.Store.Stats(); st.Pinned != 0 {
		t.Fatalf("a store submitted during shutdown holds pins: %+v", st)
	}
}
