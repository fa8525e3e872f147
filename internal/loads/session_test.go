package loads_test

import (
	"fmt"
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

// Session lifecycle as the manager sees it: pending handshakes, the
// handshake deadline, idle eviction, the peer cap, restarts.

// TestLookupMissWhileHandshakePending pins vLLM #64501 under per-peer and
// host-group: while the session's handshake is pending a PD or symmetric
// lookup answers MISS at once (the request is failed, so it stays MISS),
// and a load is refused at once, never queued behind the handshake. The
// handshake then ends at its deadline with cause handshake-failed.
func TestLookupMissWhileHandshakePending(t *testing.T) {
	for _, pol := range []string{health.PerPeer, health.HostGroup} {
		for _, mode := range []string{"pd", "symmetric"} {
			t.Run(pol+"/"+mode, func(t *testing.T) {
				f := newFleet(t)
				p := f.node("10.0.0.1:7777", sim.NodeOpts{Policy: pol})
				c := f.node("10.0.0.2:7777", sim.NodeOpts{Policy: pol})
				p.Silent = true // the dial goes nowhere
				params := pd("kv", "10.0.0.1", 7777)
				if mode == "symmetric" {
					params = sym("kv", "10.0.0.1", 7777)
				}
				if err := c.T.NewRequest(f.net.Now, "r", params); err != nil {
					t.Fatal(err)
				}
				f.net.Run()
				if v := c.T.Lookup(f.net.Now, "r", nodetest.Key("a", 0)); v != session.Miss {
					t.Fatalf("lookup while pending = %v, want MISS", v)
				}
				if !c.T.Failed("kv") {
					t.Fatal("request not failed: a later lookup could HIT and load")
				}
				j := c.T.SubmitLoad(f.net.Now, "r", nodetest.Keys("a", 2))
				if r := f.mustResult(c, j); r.OK {
					t.Fatal("load accepted behind a pending handshake")
				}
				f.settled(c)
				f.net.Advance(loads.VLLMTimers().HandshakeTimeout - 10*time.Millisecond)
				if strings.Contains(f.log.String(), "peer down") {
					t.Fatal("session ended before the handshake deadline")
				}
				f.net.Advance(10 * time.Millisecond)
				if !strings.Contains(f.log.String(), nodetest.PeerDown("10.0.0.2:7777", "10.0.0.1:7777", "handshake-failed")) {
					t.Fatalf("no handshake-failed end at the deadline:\n%s", f.log.String())
				}
			})
		}
	}
}

// TestIdleEvictionSaysGoodbye: a ready session idle for IdleTimeout with
// nothing in flight sends Goodbye(idle) before it closes, with cause
// goodbye (not a fault); a busy one is kept.
func TestIdleEvictionSaysGoodbye(t *testing.T) {
	f := newFleet(t)
	f.node("10.0.0.1:7777", sim.NodeOpts{})
	c := f.node("10.0.0.2:7777", sim.NodeOpts{})
	f.connect(c, "10.0.0.1", 7777)
	f.net.Advance(300*time.Second - 10*time.Millisecond)
	if strings.Contains(f.log.String(), "evicting idle session") {
		t.Fatal("evicted before IdleTimeout")
	}
	// Drive the last tick by hand to see the actions in order.
	now := f.net.Now.Add(10 * time.Millisecond)
	c.T.Tick(now)
	acts := c.T.TakeEffects().Actions
	bye, closed := -1, -1
	for i, a := range acts {
		if g, ok := a.Msg.(*wire.Goodbye); a.Kind == loads.ActSend && ok && g.Reason == wire.GoodbyeIdle {
			bye = i
		}
		if a.Kind == loads.ActClose {
			closed = i
			if a.Cause != health.CauseGoodbye {
				t.Fatalf("closed with cause %v, want goodbye", a.Cause)
			}
		}
	}
	if bye < 0 || closed < bye {
		t.Fatalf("want Goodbye(idle) then close, got %+v", acts)
	}
	if !strings.Contains(f.log.String(), nodetest.PeerDown("10.0.0.2:7777", "10.0.0.1:7777", "goodbye")) {
		t.Fatalf("no goodbye end:\n%s", f.log.String())
	}
}

// TestIdleEvictionSparesBusySession: a session with a load in flight is
// not idle, however long it carries nothing.
func TestIdleEvictionSparesBusySession(t *testing.T) {
	f := newFleet(t)
	f.node("10.0.0.1:7777", sim.NodeOpts{})
	tm := loads.VLLMTimers()
	tm.LoadTimeoutPD = time.Hour
	tm.IdleTimeout = 10 * time.Second
	c := f.node("10.0.0.2:7777", sim.NodeOpts{Timers: &tm})
	c.T.NewRequest(f.net.Now, "r", pd("kv", "10.0.0.1", 7777))
	f.net.Run()
	j := c.T.SubmitLoad(f.net.Now, "r", nodetest.Keys("a", 1)) // decoder first: parked
	f.net.Advance(30 * time.Second)
	f.noResult(c, j)
	if strings.Contains(f.log.String(), "evicting idle session") {
		t.Fatal("evicted a busy session")
	}
}

// TestPeerCapRefusesNewSessions: with MaxPeers sessions open, a new
// outbound one is not dialed (the request falls back) and a new inbound
// one is refused.
func TestPeerCapRefusesNewSessions(t *testing.T) {
	tm := loads.VLLMTimers()
	tm.MaxPeers = 2
	f := newFleet(t)
	for i := 0; i < 3; i++ {
		f.node(fmt.Sprintf("10.0.0.1:%d", 7777+i), sim.NodeOpts{})
	}
	c := f.node("10.0.0.9:7777", sim.NodeOpts{Timers: &tm})
	f.connect(c, "10.0.0.1", 7777)
	f.connect(c, "10.0.0.1", 7778)
	at := len(f.net.Dials)
	c.T.NewRequest(f.net.Now, "r", pd("kv", "10.0.0.1", 7779))
	f.net.Run()
	if n := dialsTo(f.net, "10.0.0.1", at); n != 0 {
		t.Fatalf("%d dials over the cap", n)
	}
	if v := c.T.Lookup(f.net.Now, "r", nodetest.Key("a", 0)); v != session.Miss {
		t.Fatalf("lookup over the cap = %v, want MISS", v)
	}
	// Inbound: a third peer dials the capped node.
	o := f.node("10.0.0.5:7777", sim.NodeOpts{})
	o.T.NewRequest(f.net.Now, "in", pd("kv-in", "10.0.0.9", 7777))
	f.net.Run()
	if !strings.Contains(f.log.String(), "refusing inbound session: peer cap reached") {
		t.Fatalf("inbound session over the cap not refused:\n%s", f.log.String())
	}
	if v := o.T.Lookup(f.net.Now, "in", nodetest.Key("a", 0)); v != session.Miss {
		t.Fatalf("refused peer's lookup = %v, want MISS", v)
	}
	// Below the cap again, new sessions open.
	f.net.Advance(300 * time.Second) // idle eviction frees both
	c.T.NewRequest(f.net.Now, "r2", pd("kv2", "10.0.0.1", 7779))
	f.net.Run()
	if v := c.T.Lookup(f.net.Now, "r2", nodetest.Key("a", 0)); v != session.Hit {
		t.Fatalf("lookup below the cap = %v, want HIT", v)
	}
}

// TestNewIncarnationFailsOldAtOnce: a peer that restarted (new
// incarnation) while its old connection still looked alive: as soon as
// the new incarnation introduces itself, every load owed by the old one
// fails, without waiting for a timeout.
func TestNewIncarnationFailsOldAtOnce(t *testing.T) {
	f := newFleet(t)
	p := f.node("10.0.0.1:7777", sim.NodeOpts{})
	c := f.node("10.0.0.2:7777", sim.NodeOpts{})
	c.T.NewRequest(f.net.Now, "r", pd("kv", "10.0.0.1", 7777))
	f.net.Run()
	j := c.T.SubmitLoad(f.net.Now, "r", nodetest.Keys("a", 2)) // parked on the producer
	f.net.Run()
	f.noResult(c, j)
	p.Silent = true // the old process hangs, its connections stay open
	np, err := f.net.Replace(p, sim.NodeOpts{Incarnation: 2})
	if err != nil {
		t.Fatal(err)
	}
	np.T.NewRequest(f.net.Now, "back", pd("kv-back", "10.0.0.2", 7777)) // it dials us
	f.net.Run()
	r := f.mustResult(c, j)
	if r.OK || !strings.Contains(r.Reason, "conn-reset") {
		t.Fatalf("old incarnation's load: %+v, want a conn-reset failure", r)
	}
	if v := c.T.Lookup(f.net.Now, "r", nodetest.Key("a", 0)); v != session.Miss {
		t.Fatalf("lookup of the failed request = %v, want MISS", v)
	}
	if !strings.Contains(f.log.String(), "peer restarted") {
		t.Fatal("no restart log line")
	}
}

// TestNewIncarnationProbedFirst: over plain TCP a Hello's new incarnation
// proves nothing, so the old session is probed before it is replaced. A
// hung old process does not answer: its loads fail only once the probe
// time ran out, and then the newcomer replaces it.
func TestNewIncarnationProbedFirst(t *testing.T) {
	f := newFleet(t)
	p := f.node("10.0.0.1:7777", sim.NodeOpts{})
	c := f.node("10.0.0.2:7777", sim.NodeOpts{ProbeBeforeReplace: 2 * time.Second})
	c.T.NewRequest(f.net.Now, "r", pd("kv", "10.0.0.1", 7777))
	f.net.Run()
	j := c.T.SubmitLoad(f.net.Now, "r", nodetest.Keys("a", 2)) // parked on the producer
	f.net.Run()
	p.Silent = true // the old process hangs, its connections stay open
	np, err := f.net.Replace(p, sim.NodeOpts{Incarnation: 2})
	if err != nil {
		t.Fatal(err)
	}
	np.T.NewRequest(f.net.Now, "back", pd("kv-back", "10.0.0.2", 7777)) // it dials us
	f.net.Advance(time.Second)
	f.noResult(c, j) // held: the old session is being probed
	// Held without a HelloAck: the newcomer's own session is not ready, so
	// it sends nothing through the held connection.
	if st := sessionState(np, f.net.Now, "10.0.0.2:7777"); st != loads.SessionConnecting {
		t.Fatalf("newcomer's session to the consumer while held: %v, want still handshaking", st)
	}
	if !strings.Contains(f.log.String(), "probing the live session first") {
		t.Fatal("no hold log line")
	}
	f.net.Advance(1100 * time.Millisecond)
	r := f.mustResult(c, j)
	if r.OK || !strings.Contains(r.Reason, "conn-reset") {
		t.Fatalf("old incarnation's load: %+v, want a conn-reset failure", r)
	}
	if !strings.Contains(f.log.String(), "did not answer its probe") {
		t.Fatal("no replacement log line")
	}
	f.net.Run()
	if st := sessionState(np, f.net.Now, "10.0.0.2:7777"); st != loads.SessionReady {
		t.Fatalf("newcomer's session after it replaced the old one: %v, want ready", st)
	}
	// The newcomer is the peer's session now: a new request loads through it.
	ks := nodetest.Keys("b", 2)
	f.put(np, ks)
	np.T.NewRequest(f.net.Now, "p2", decoder("kv2"))
	np.T.SubmitStore(f.net.Now, "p2", ks)
	c.T.NewRequest(f.net.Now, "r2", pd("kv2", "10.0.0.1", 7777))
	f.net.Run()
	j2 := c.T.SubmitLoad(f.net.Now, "r2", ks)
	f.net.Run()
	if r := f.mustResult(c, j2); !r.OK {
		t.Fatalf("load through the newcomer: %+v", r)
	}
	f.verify(c, ks)
}

// TestFinishedRequestLeavesFailedSet: the failed set holds ids of live
// requests only. A finish that aborts a load in flight (publishing its
// failure) or a session that dies after the finish must not leave the id
// behind, or the set grows for ever.
func TestFinishedRequestLeavesFailedSet(t *testing.T) {
	f := newFleet(t)
	f.node("10.0.0.1:7777", sim.NodeOpts{})
	c := f.node("10.0.0.2:7777", sim.NodeOpts{})
	c.T.NewRequest(f.net.Now, "r", pd("kv", "10.0.0.1", 7777))
	f.net.Run()
	j := c.T.SubmitLoad(f.net.Now, "r", nodetest.Keys("a", 2)) // parked: decoder first
	f.net.Run()
	c.T.RequestFinished(f.net.Now, "r")
	if r := f.mustResult(c, j); r.OK {
		t.Fatal("load OK")
	}
	if c.T.Failed("kv") {
		t.Fatal("finished request's id left in the failed set by its own abort")
	}
	c.T.NewRequest(f.net.Now, "r2", pd("kv2", "10.0.0.1", 7777))
	f.net.Run()
	j2 := c.T.SubmitLoad(f.net.Now, "r2", nodetest.Keys("b", 2))
	f.net.Run()
	c.T.RequestFinished(f.net.Now, "r2")
	f.net.CloseControl("10.0.0.1:7777") // the session dies with the failed load still held
	f.mustResult(c, j2)
	if c.T.Failed("kv2") {
		t.Fatal("finished request's id put in the failed set by the reap")
	}
	f.settled(c)
}

// sessionState is the state of n's live (not ended) session with peer, or
// "none".
func sessionState(n *sim.Node, now time.Time, peer string) string {
	st := "none"
	for _, s := range n.T.View(now).Sessions {
		if s.Peer == peer && s.State != loads.SessionEnded {
			st = s.State
		}
	}
	return st
}
