package loads_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/session"
)

// TestDomainSilentPathWaits (issue 24, slow-flapping's false fallback): a
// request to a rank whose session owes data and has delivered nothing for
// probe_timeout is not answered HIT on that session. Its data path was
// blackholed and healed, but TCP holds the stream's frames until the next
// retransmission, past the progress watchdog: a load put on the session
// would fail with it. The request waits for the watchdog's verdict, redials
// on demand, and loads on the new session.
func TestDomainSilentPathWaits(t *testing.T) {
	g := newPodFixture(t, health.Domain)
	peer := "10.0.0.1:7780"
	g.net.Node(peer).DataBlackhole = true
	g.net.Advance(300 * time.Millisecond) // silent, owing the fixture's load: > probe_timeout
	g.seq++
	req := fmt.Sprintf("r%d", g.seq)
	host, port := nodetest.SplitPeer(t, peer)
	p := pd("kv-"+req, host, port)
	p.RemotePrefiller.RemoteDomain = domainOf(peer)
	if err := g.c.T.NewRequest(g.net.Now, req, p); err != nil {
		t.Fatal(err)
	}
	if v := g.c.T.Lookup(g.net.Now, req, nodetest.Key(req, 0)); v != session.Retry {
		t.Fatalf("lookup to a session silent while owed: %v, want RETRY", v)
	}
	// Healed 700 ms in: its frames, held since the first refusal, wait for
	// the retransmission 1.4 s after it, past the watchdog (1 s).
	g.net.Advance(400 * time.Millisecond)
	g.net.Node(peer).DataBlackhole = false
	start := g.net.Now
	var v session.Verdict
	for v = session.Retry; v == session.Retry && g.net.Now.Sub(start) < 2*time.Second; {
		g.net.Advance(10 * time.Millisecond)
		v = g.c.T.Lookup(g.net.Now, req, nodetest.Key(req, 0))
	}
	if !g.done(g.jobs[peer]) {
		t.Fatalf("the silent session's load still in flight: its watchdog did not fire (%v after %v)\n%s", v, g.net.Now.Sub(start), tail(g.log.String()))
	}
	if v != session.Hit {
		t.Fatalf("request after the watchdog: %v, want HIT on a new session\n%s", v, tail(g.log.String()))
	}
	j := g.c.T.SubmitLoad(g.net.Now, req, nodetest.Keys(req, 2))
	prod := g.net.Node(peer)
	prod.T.NewRequest(g.net.Now, "p", decoder("kv-"+req))
	ks := nodetest.Keys(req, 2)
	g.put(prod, ks)
	prod.T.SubmitStore(g.net.Now, "p", ks)
	if r := g.mustResult(g.c, j); !r.OK {
		t.Fatalf("load on the new session: %+v", r)
	}
}

// TestDomainDeliveringPathNoWait: the same session, delivering (no data
// path fault), answers HIT at once: owing data is not evidence.
func TestDomainDeliveringPathNoWait(t *testing.T) {
	g := newPodFixture(t, health.Domain)
	g.net.Advance(300 * time.Millisecond)
	if _, v := g.firstLookup("10.0.0.1:7780"); v != session.Hit {
		t.Fatalf("lookup to a live session owing data: %v, want HIT", v)
	}
}

func tail(s string) string { return s[max(0, len(s)-3000):] }
