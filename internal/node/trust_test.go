package node

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/status"
)

// TestTrustModelLogged: the node says at start what proves identity.
func TestTrustModelLogged(t *testing.T) {
	f := newTLSFleet(t)
	plain := startTN(t, nodeOpt{})
	waitLog(t, plain, "identity: plain TCP: a Hello's peer id must name its source address")
	trusting := startTN(t, nodeOpt{mut: func(c *Config) { c.TrustClaimedHost = true }})
	waitLog(t, trusting, "identity: plain TCP with trust_claimed_host")
	tls := startTN(t, nodeOpt{mut: f.rank(t)})
	waitLog(t, tls, "identity: mutual TLS, one certificate per rank")
	hostOnly := startTN(t, nodeOpt{mut: func(c *Config) { c.TLS = f.node(t, "127.0.0.1") }})
	waitLog(t, hostOnly, "this node's certificate names no rank")
	if strings.Contains(tls.logs.String(), "names no rank") {
		t.Error("a rank certificate reported as naming no rank")
	}
}

// TestSameHostExposureSaid: a plain-TCP node that sees two ranks of one
// host (its own, and a peer's Hello from another port of it) says what a
// process there can do and how to close it: in its log (once per host),
// in the status snapshot, `kvp2p status`'s text, and the status page.
// Under mTLS it says nothing of the kind.
func TestSameHostExposureSaid(t *testing.T) {
	p := startTN(t, nodeOpt{})
	sp := startSpoofer(t, p.PeerID(), "127.0.0.1:39600", nil)
	select {
	case <-sp.ready:
	case <-time.After(5 * time.Second):
		t.Fatal("no session")
	}
	waitLog(t, p, "identity: plain TCP with several ranks on 127.0.0.1")
	s, err := p.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s.Node.Identity != "plain-tcp" || !slices.Equal(s.Node.SharedHosts, []string{"127.0.0.1"}) ||
		!strings.Contains(s.Node.Exposure, "one certificate per rank") {
		t.Fatalf("snapshot: identity %q shared %v exposure %q", s.Node.Identity, s.Node.SharedHosts, s.Node.Exposure)
	}
	var text strings.Builder
	if err := status.WriteText(&text, s); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "IDENTITY (plain-tcp): plain TCP with several ranks on 127.0.0.1") {
		t.Fatalf("kvp2p status says nothing of the shared host:\n%s", text.String())
	}
	addr := serveStatus(t, p.Node)
	if page := get(t, "http://"+addr+"/", http.StatusOK); !strings.Contains(page, "identity: plain TCP with several ranks on 127.0.0.1") {
		t.Fatal("the status page says nothing of the shared host")
	}
	if n := strings.Count(p.logs.String(), "several ranks on 127.0.0.1"); n != 1 {
		t.Fatalf("said %d times, want once", n)
	}

	f := newTLSFleet(t)
	tp := startTN(t, nodeOpt{mut: f.rank(t)})
	ts, err := tp.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ts.Node.Identity != "mtls" || ts.Node.Exposure != "" {
		t.Fatalf("mTLS snapshot: identity %q exposure %q", ts.Node.Identity, ts.Node.Exposure)
	}
}
