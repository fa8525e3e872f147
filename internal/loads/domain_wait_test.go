package loads_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/session"
)

// firstLookup registers a PD request to peer on g's consumer and answers
// its first lookup, at once (no time passes).
func (g *podFixture) firstLookup(peer string) (string, session.Verdict) {
	g.t.Helper()
	g.seq++
	host, port := splitPeer(g.t, peer)
	req := fmt.Sprintf("r%d", g.seq)
	p := pd("kv-"+req, host, port)
	p.RemotePrefiller.RemoteDomain = domainOf(peer)
	if err := g.c.T.NewRequest(g.net.Now, req, p); err != nil {
		g.t.Fatal(err)
	}
	return req, g.c.T.Lookup(g.net.Now, req, key(req, 0))
}

// TestDomainRefusedDialMiss: once a dial to a rank was refused (nobody
// listens: its process is gone), a request that finds a new dial to it
// pending answers MISS at once, as per-peer does, instead of waiting a
// step to learn that this dial is refused too. A hello refused by a live
// rank does not count: a request still waits on the next dial.
func TestDomainRefusedDialMiss(t *testing.T) {
	for _, tc := range []struct {
		name string
		kill func(g *podFixture, peer string)
		want session.Verdict
	}{
		{"crashed", func(g *podFixture, peer string) { g.net.Crash(peer) }, session.Miss},
		{"refusing hellos", func(g *podFixture, peer string) {
			g.net.Node(peer).RefuseHandshake = true
			g.net.CloseControl(peer)
		}, session.Retry},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newPodFixture(t, health.Domain)
			peer := "10.0.0.1:7780"
			tc.kill(g, peer)
			g.net.Advance(10 * time.Millisecond)
			// The first request after the end dials and waits: the rank
			// may only have lost its connection.
			req, v := g.firstLookup(peer)
			if v != session.Retry {
				t.Fatalf("first request: %v, want RETRY on its dial", v)
			}
			g.net.Advance(10 * time.Millisecond)
			if v := g.c.T.Lookup(g.net.Now, req, key(req, 0)); v != session.Miss {
				t.Fatalf("first request a step later: %v, want MISS (its dial failed)", v)
			}
			g.net.Advance(100 * time.Millisecond) // past RefusedHold: dialed on demand again
			if _, v := g.firstLookup(peer); v != tc.want {
				t.Fatalf("next request, its dial pending: %v, want %v", v, tc.want)
			}
		})
	}
}

// TestDomainDeadPathShortWait: a request to a rank whose data path was
// last seen dead (its probe went unanswered) waits at most 50 ms in all,
// not connect_wait + probe_timeout; once the path heals, the next request
// loads within 50 ms (the rank is not held against it).
func TestDomainDeadPathShortWait(t *testing.T) {
	g := newPodFixture(t, health.Domain)
	for _, p := range podPeers()[1:8] {
		g.net.Node(p).DataBlackhole = true
	}
	g.net.CloseControl("10.0.0.1:7777")
	g.net.Advance(300 * time.Millisecond) // the probes of ranks 1-7 went unanswered
	peer := "10.0.0.1:7780"
	start := g.net.Now
	if j := g.load(peer); j != 0 {
		t.Fatalf("load to a silent rank started (job %d)", j)
	}
	if took := g.net.Now.Sub(start); took > 50*time.Millisecond {
		t.Fatalf("request to a dead data path fell back after %v, want at most 50 ms", took)
	}
	// Still dead a little later: falls back again, as fast.
	g.net.Advance(100 * time.Millisecond)
	g.load(peer)
	g.net.Advance(20 * time.Millisecond)
	for _, p := range podPeers()[1:8] {
		g.net.Node(p).DataBlackhole = false
	}
	start = g.net.Now
	j := g.load(peer)
	if j == 0 {
		t.Fatalf("healed rank fell back:\n%s", tail(g.log.String()))
	}
	if took := g.net.Now.Sub(start); took > 50*time.Millisecond {
		t.Fatalf("healed rank took %v to load", took)
	}
}

func tail(s string) string { return s[max(0, len(s)-3000):] }
