package loads_test

import (
	"fmt"
	"testing"

	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/sim"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// TestReceiveRef: ReceiveRef is Receive without the lookup by id: the same
// effects on a live connection, and none on the handle of a connection
// that is gone or on the zero handle (as Receive ignores an unknown id).
func TestReceiveRef(t *testing.T) {
	f := newFleet(t)
	a := f.node("10.0.0.1:7777", sim.NodeOpts{})
	b := f.node("10.0.0.2:7777", sim.NodeOpts{})
	now := f.net.Now
	ia, ib := a.T.Accept(now), b.T.Accept(now)
	if ia != ib {
		t.Fatalf("conn ids %d and %d: the two tables should number alike", ia, ib)
	}
	ref := b.T.Ref(ib)
	a.T.TakeEffects()
	b.T.TakeEffects()
	msgs := []wire.Message{&wire.Ping{Seq: 1}, &wire.Pong{Seq: 1}, &wire.Ping{Seq: 2}}
	for _, m := range msgs {
		a.T.Receive(now, ia, m)
		b.T.ReceiveRef(now, ref, m)
		ea, eb := describe(a.T.TakeEffects()), describe(b.T.TakeEffects())
		if ea != eb {
			t.Fatalf("%T: Receive did %s, ReceiveRef did %s", m, ea, eb)
		}
	}
	b.T.ConnLost(now, ib)
	b.T.DataClosed(now, ib)
	b.T.TakeEffects()
	if (b.T.Ref(ib) != loads.ConnRef{}) {
		t.Fatal("Ref of a connection that is gone is not the zero handle")
	}
	for _, r := range []loads.ConnRef{ref, {}, b.T.Ref(99)} {
		b.T.ReceiveRef(now, r, &wire.Ping{Seq: 3})
		if b.T.HasEffects() {
			t.Fatalf("ReceiveRef on a handle naming no connection had effects: %+v", b.T.TakeEffects())
		}
	}
}

// describe prints effects with their messages' contents (not addresses).
func describe(e loads.Effects) string {
	s := fmt.Sprintf("%+v ", e.Results)
	for _, a := range e.Actions {
		s += fmt.Sprintf("{%d conn %d %q %+v %v} ", a.Kind, a.Conn, a.Peer, a.Msg, a.Cause)
	}
	return s
}
