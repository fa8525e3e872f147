package loads_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/sim"
)

// dialFixture: a consumer and one producer rank with no session yet.
type dialFixture struct {
	*fleet
	c, p *sim.Node
	seq  int
}

func newDialFixture(t *testing.T) *dialFixture {
	f := newFleet(t)
	g := &dialFixture{fleet: f}
	g.p = f.node("10.0.0.1:7777", sim.NodeOpts{Policy: health.Domain, Domain: "pod-a"})
	g.c = f.node("10.0.0.2:7777", sim.NodeOpts{Policy: health.Domain})
	return g
}

// ask registers a PD request to the producer and looks it up every engine
// step (10 ms) until it is answered: its verdict and how long it took.
func (g *dialFixture) ask() (session.Verdict, time.Duration) {
	g.t.Helper()
	g.seq++
	req := fmt.Sprintf("r%d", g.seq)
	p := pd("kv-"+req, "10.0.0.1", 7777)
	p.RemotePrefiller.RemoteDomain = "pod-a"
	if err := g.c.T.NewRequest(g.net.Now, req, p); err != nil {
		g.t.Fatal(err)
	}
	start := g.net.Now
	for {
		g.net.Run()
		if v := g.c.T.Lookup(g.net.Now, req, nodetest.Key(req, 0)); v != session.Retry || g.net.Now.Sub(start) > 2*time.Second {
			g.c.T.RequestFinished(g.net.Now, req)
			return v, g.net.Now.Sub(start)
		}
		g.net.Advance(10 * time.Millisecond)
	}
}

// TestDomainUnansweredDial (issue 24, host-blackhole): a connect attempt
// that no kernel answers went into a partition. A request does not wait
// the handshake wait on it: one fresh attempt after Unanswered (50 ms),
// then MISS. After the heal, a request does not wait on an attempt made
// into the partition either: it is replaced at once, and the request hits.
func TestDomainUnansweredDial(t *testing.T) {
	g := newDialFixture(t)
	g.p.Silent = true // a partition: SYNs go nowhere
	v, took := g.ask()
	if v != session.Miss || took > 120*time.Millisecond {
		t.Fatalf("request into a partition: %v after %v, want MISS within 120 ms (two unanswered attempts)", v, took)
	}
	// The fallback says why, once, where it was decided.
	if l := g.log.String(); strings.Count(l, "request falls back to local prefill") != 1 ||
		!strings.Contains(l, "kv_req=kv-r1") || !strings.Contains(l, "handshake did not finish") {
		t.Fatalf("the fallback was not logged once with its reason:\n%s", tail(l))
	}
	g.net.Advance(35 * time.Millisecond)
	g.ask() // leaves an attempt into the partition pending
	g.p.Silent = false
	g.net.Advance(20 * time.Millisecond)
	v, took = g.ask()
	if v != session.Hit || took > 30*time.Millisecond {
		t.Fatalf("request after the heal: %v after %v, want HIT within 30 ms\n%s", v, took, tail(g.log.String()))
	}
}

// TestDomainStoppedListenerAnswered: a listener whose process is stopped
// still has its kernel answer the SYN: that attempt is not unanswered, and
// a request waits the full handshake wait on it (the process may resume).
func TestDomainStoppedListenerAnswered(t *testing.T) {
	g := newDialFixture(t)
	g.net.Stall(g.p.ID)
	v, took := g.ask()
	if took < 250*time.Millisecond {
		t.Fatalf("request to a stopped listener: %v after %v, want the handshake wait (250 ms)", v, took)
	}
}
