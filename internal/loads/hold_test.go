package loads_test

import (
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/sim"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// tieBreakImpostor scripts issue 25's attack #1 on the table alone: the
// consumer (10.0.0.2, whose id sorts above the producer's) holds its own
// ready session to the producer; an inbound newcomer claims the producer's
// id and its current incarnation. The simultaneous-dial tie-break would
// let it win. It returns the consumer, the live session's id, the
// newcomer's id, and the sequence number of the probe sent on the live
// session (0 if none was).
func tieBreakImpostor(t *testing.T, f *fleet) (c *sim.Node, old, nc loads.ConnID, seq uint64) {
	t.Helper()
	f.node("10.0.0.1:7777", sim.NodeOpts{})
	c = f.node("10.0.0.2:7777", sim.NodeOpts{ProbeBeforeReplace: 2 * time.Second})
	f.connect(c, "10.0.0.1", 7777)
	for _, s := range c.T.View(f.net.Now).Sessions {
		if s.Peer == "10.0.0.1:7777" && s.State == loads.SessionReady && s.Outbound {
			old = s.Conn
		}
	}
	if old == 0 {
		t.Fatal("no ready outbound session to the producer")
	}
	now := f.net.Now
	nc = c.T.Accept(now)
	c.T.Receive(now, nc, &wire.Hello{Version: wire.Version, PeerID: "10.0.0.1:7777", Incarnation: 1,
		BlockBytes: blockBytes, MaxInflight: 64, MaxFrame: 4 << 20})
	for _, a := range c.T.TakeEffects().Actions {
		switch {
		case a.Conn == old && a.Kind == loads.ActData && a.Op.Kind == session.OpProbe:
			seq = a.Op.Seq
		case a.Conn == old && a.Kind == loads.ActClose:
			t.Fatal("the live session was closed on the newcomer's word")
		case a.Conn == nc && a.Kind == loads.ActSend:
			if _, ok := a.Msg.(*wire.HelloAck); ok {
				t.Fatal("the newcomer was acknowledged before the live session was checked")
			}
		}
	}
	return c, old, nc, seq
}

// TestTieBreakProbesReadySession: the live session answers its probe, so
// the newcomer is refused (Goodbye duplicate), the live session stays, and
// the refusal is counted.
func TestTieBreakProbesReadySession(t *testing.T) {
	f := newFleet(t)
	c, old, nc, seq := tieBreakImpostor(t, f)
	if seq == 0 {
		t.Fatal("the live session was not probed")
	}
	if !strings.Contains(f.log.String(), "probing the live session first") {
		t.Fatal("no hold log line")
	}
	c.T.ProbeAck(f.net.Now, old, seq)
	refused := false
	for _, a := range c.T.TakeEffects().Actions {
		if a.Conn == old && a.Kind == loads.ActClose {
			t.Fatal("the live session was closed although it answered")
		}
		if g, ok := a.Msg.(*wire.Goodbye); ok && a.Conn == nc && g.Reason == wire.GoodbyeDuplicate {
			refused = true
		}
	}
	if !refused {
		t.Fatal("the newcomer was not refused")
	}
	if r := c.T.Replacements(); r.Replaced != 0 || r.Refused != 1 {
		t.Fatalf("replacements %+v, want 0 replaced, 1 refused", r)
	}
	if st := sessionState(c, f.net.Now, "10.0.0.1:7777"); st != loads.SessionReady {
		t.Fatalf("the producer's session: %v, want ready", st)
	}
}

// TestTieBreakReplacesSilentSession: a live session that does not answer
// within ProbeBeforeReplace is proven dead: it is closed, the newcomer
// acknowledged, and the replacement counted and logged.
func TestTieBreakReplacesSilentSession(t *testing.T) {
	f := newFleet(t)
	c, old, nc, seq := tieBreakImpostor(t, f)
	if seq == 0 {
		t.Fatal("the live session was not probed")
	}
	c.T.Tick(f.net.Now.Add(2100 * time.Millisecond))
	closed, acked := false, false
	for _, a := range c.T.TakeEffects().Actions {
		if a.Conn == old && a.Kind == loads.ActClose {
			closed = true
		}
		if _, ok := a.Msg.(*wire.HelloAck); ok && a.Conn == nc {
			acked = true
		}
	}
	if !closed || !acked {
		t.Fatalf("silent live session closed %v, newcomer acknowledged %v; want both", closed, acked)
	}
	if r := c.T.Replacements(); r.Replaced != 1 || r.Refused != 0 {
		t.Fatalf("replacements %+v, want 1 replaced, 0 refused", r)
	}
	if !strings.Contains(f.log.String(), "did not answer its probe") {
		t.Fatal("no replacement log line")
	}
}
