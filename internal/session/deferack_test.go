package session

import (
	"testing"

	"github.com/kvp2p/kvp2p/internal/nodetest/testkeys"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// TestDeferAck: with DeferAck the inbound side answers the peer's Hello
// with nothing, so the peer stays in its handshake (it sends no lookups or
// fetches); AckHello sends the one HelloAck and the handshake completes;
// a second AckHello sends nothing more.
func TestDeferAck(t *testing.T) {
	pr := newPair(t, nil)
	pr.p.s.DeferAck()
	pr.c.s.Start(pr.now)
	pr.p.s.Start(pr.now)
	pr.flush()
	if n := len(sentOf[*wire.HelloAck](pr.p)); n != 0 {
		t.Fatalf("deferred side sent %d HelloAcks before AckHello", n)
	}
	if pr.c.s.Ready() {
		t.Fatal("the dialing side is ready without a HelloAck")
	}
	pr.lookup("r", testkeys.Keys("a", 1)) // queued behind the handshake
	pr.flush()
	if n := len(sentOf[*wire.Lookup](pr.c)); n != 0 {
		t.Fatalf("%d lookups sent before the handshake completed", n)
	}
	pr.p.s.AckHello(pr.now)
	pr.p.s.AckHello(pr.now)
	pr.flush()
	if n := len(sentOf[*wire.HelloAck](pr.p)); n != 1 {
		t.Fatalf("%d HelloAcks after AckHello twice, want 1", n)
	}
	if !pr.c.s.Ready() || !pr.p.s.Ready() {
		t.Fatal("handshake not complete after AckHello")
	}
	if n := len(sentOf[*wire.Lookup](pr.c)); n != 1 {
		t.Fatalf("%d lookups after the handshake, want the queued one", n)
	}
}

// TestAckHelloWithoutHello: AckHello before any Hello (or without
// DeferAck) sends nothing.
func TestAckHelloWithoutHello(t *testing.T) {
	pr := newPair(t, nil)
	pr.p.s.AckHello(pr.now)
	pr.p.s.DeferAck()
	pr.p.s.AckHello(pr.now) // no Hello yet: nothing to answer
	pr.flush()
	if n := len(sentOf[*wire.HelloAck](pr.p)); n != 0 {
		t.Fatalf("%d HelloAcks without a Hello", n)
	}
}
