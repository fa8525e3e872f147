package node

import (
	"testing"

	"github.com/kvp2p/kvp2p/internal/nodetest"
)

// TestRefuseHandshakes: while the source refuses handshakes a consumer's
// request falls back with cause incompatible and the source's sessions
// already up are untouched; once it accepts again, a new session is ready.
func TestRefuseHandshakes(t *testing.T) {
	p := startTN(t, nodeOpt{})
	c := startTN(t, nodeOpt{})
	if err := p.RefuseHandshakes(true); err != nil {
		t.Fatal(err)
	}
	ks := nodetest.Keys("rh", 1)
	storeBlocks(t, p, "kv1", ks)
	if err := c.m.NewRequest("d1", nodetest.PDParams(t, "kv1", p.PeerID())); err != nil {
		t.Fatal(err)
	}
	if v := waitVerdict(t, c.m, "d1", ks[0]); v != Miss {
		t.Fatalf("lookup while refused = %v, want MISS", v)
	}
	waitLog(t, c, "cause=incompatible")
	waitLog(t, c, "this node refuses handshakes")
	c.m.RequestFinished("d1")
	if err := p.RefuseHandshakes(false); err != nil {
		t.Fatal(err)
	}
	warm(t, c, p)
}

// TestGoodbyeIdle: the source ends its session with Goodbye(idle); the
// consumer takes it as an orderly end, not a fault, and reconnects on its
// next request.
func TestGoodbyeIdle(t *testing.T) {
	p := startTN(t, nodeOpt{})
	c := startTN(t, nodeOpt{})
	warm(t, c, p)
	n, err := p.GoodbyeIdle()
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("GoodbyeIdle ended %d sessions, want 1", n)
	}
	waitLog(t, c, "cause=goodbye")
	warm(t, c, p)
	p.Close()
	<-p.done
	if err := p.RefuseHandshakes(true); err != ErrClosed {
		t.Errorf("RefuseHandshakes after Close = %v, want ErrClosed", err)
	}
	if _, err := p.GoodbyeIdle(); err != ErrClosed {
		t.Errorf("GoodbyeIdle after Close = %v, want ErrClosed", err)
	}
}
