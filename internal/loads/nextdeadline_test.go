package loads_test

import (
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/sim"
)

// TestNextDeadlineTickBeforeIsNoop: a Tick before the table's NextDeadline
// decides nothing and leaves the deadline where it was, for every policy,
// over idle sessions in both directions (heartbeats due every interval)
// and a parked store (its unbound timeout): what lets the simulator skip
// such ticks.
func TestNextDeadlineTickBeforeIsNoop(t *testing.T) {
	for _, pol := range health.Names() {
		f := newFleet(t)
		c := f.node("10.0.0.2:7777", sim.NodeOpts{Policy: pol})
		p := f.node("10.0.0.1:7777", sim.NodeOpts{Policy: pol})
		f.connect(c, "10.0.0.1", 7777)
		ks := nodetest.Keys("nd-"+pol, 2)
		f.put(p, ks)
		if err := p.T.NewRequest(f.net.Now, "p1", decoder("kv1")); err != nil {
			t.Fatal(err)
		}
		p.T.SubmitStore(f.net.Now, "p1", ks)
		f.net.Run()
		hb := loads.PresetTimers(pol).HeartbeatInterval
		early := 0
		for range 400 {
			f.net.Advance(7 * time.Millisecond) // off the tick grid too
			for _, nd := range []*sim.Node{c, p} {
				at, ok := nd.T.NextDeadline()
				if !ok {
					t.Fatalf("%s/%s: a ready session and no deadline", pol, nd.ID)
				}
				if !at.After(f.net.Now) {
					continue // due: the simulator ticks it at this grid point
				}
				if at.Sub(f.net.Now) > hb {
					t.Fatalf("%s/%s: next deadline %v away, beyond the heartbeat interval %v", pol, nd.ID, at.Sub(f.net.Now), hb)
				}
				early++
				nd.T.Tick(f.net.Now)
				if nd.T.HasEffects() {
					t.Fatalf("%s/%s: a tick %v before the deadline decided %+v", pol, nd.ID, at.Sub(f.net.Now), nd.T.TakeEffects())
				}
				if again, _ := nd.T.NextDeadline(); !again.Equal(at) {
					t.Fatalf("%s/%s: a tick before the deadline moved it from %v to %v", pol, nd.ID, at, again)
				}
			}
		}
		if early < 100 {
			t.Fatalf("%s: only %d ticks before a deadline", pol, early)
		}
	}
}

// TestNextDeadlineNothingPending: a table with no session, store or
// probe has no deadline once its policy's own timers have run (domain
// prunes every minute).
func TestNextDeadlineNothingPending(t *testing.T) {
	for _, pol := range health.Names() {
		f := newFleet(t)
		nd := f.node("10.0.0.1:7777", sim.NodeOpts{Policy: pol})
		f.net.Advance(time.Second)
		at, ok := nd.T.NextDeadline()
		switch {
		case pol == health.Domain && (!ok || at.Sub(f.net.Now) > time.Minute || !at.After(f.net.Now)):
			t.Fatalf("domain: next deadline %v (%v), want the next prune within a minute", at, ok)
		case pol != health.Domain && ok:
			t.Fatalf("%s: an idle table has a deadline at %v", pol, at)
		}
	}
}

// TestReapedIDRetention: a reaped id is refused for ReapedRetention after
// its reap, and then no more, whether or not a tick pruned it in between:
// the age is checked where it is used, so an owner that skips ticks with
// nothing due (the simulator) is told the same as one that ticks.
func TestReapedIDRetention(t *testing.T) {
	for _, tickFirst := range []bool{false, true} {
		f := newFleet(t)
		p := f.node("10.0.0.1:7777", sim.NodeOpts{})
		ks := nodetest.Keys("ret", 2)
		f.put(p, ks)
		if err := p.T.NewRequest(f.net.Now, "p1", decoder("kv1")); err != nil {
			t.Fatal(err)
		}
		p.T.SubmitStore(f.net.Now, "p1", ks)
		f.net.Advance(60 * time.Second)
		reapedAt := f.net.Now
		if len(p.Results) != 1 || p.Results[0].OK {
			t.Fatalf("unbound store not reaped at 60 s: %+v", p.Results)
		}
		submit := func(at time.Time) loads.JobResult {
			t.Helper()
			if tickFirst {
				p.T.Tick(at)
			}
			j := p.T.SubmitStore(at, "p1", ks)
			for _, r := range p.T.TakeEffects().Results {
				if r.Job == j {
					return r
				}
			}
			return loads.JobResult{Job: j, OK: true, Reason: "parked"}
		}
		if r := submit(reapedAt.Add(10*time.Minute - time.Millisecond)); r.OK || !strings.Contains(r.Reason, "reaped") {
			t.Fatalf("tick=%v: just before the retention ends: %+v, want refused as reaped", tickFirst, r)
		}
		if r := submit(reapedAt.Add(10 * time.Minute)); strings.Contains(r.Reason, "reaped") {
			t.Fatalf("tick=%v: at the retention's end: %+v, want it no longer refused", tickFirst, r)
		}
	}
}
