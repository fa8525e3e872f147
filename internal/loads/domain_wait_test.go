package loads_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/session"
)

// firstLookup registers a PD request to peer on g's consumer and answers
// its first lookup, at once (no time passes).
func (g *podFixture) firstLookup(peer string) (string, session.Verdict) {
	g.t.Helper()
	g.seq++
	host, port := nodetest.SplitPeer(g.t, peer)
	req := fmt.Sprintf("r%d", g.seq)
	p := pd("kv-"+req, host, port)
	p.RemotePrefiller.RemoteDomain = domainOf(peer)
	if err := g.c.T.NewRequest(g.net.Now, req, p); err != nil {
		g.t.Fatal(err)
	}
	return req, g.c.T.Lookup(g.net.Now, req, nodetest.Key(req, 0))
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
			if v := g.c.T.Lookup(g.net.Now, req, nodetest.Key(req, 0)); v != session.Miss {
				t.Fatalf("first request a step later: %v, want MISS (its dial failed)", v)
			}
			g.net.Advance(100 * time.Millisecond) // past RefusedHold: dialed on demand again
			if _, v := g.firstLookup(peer); v != tc.want {
				t.Fatalf("next request, its dial pending: %v, want %v", v, tc.want)
			}
		})
	}
}
