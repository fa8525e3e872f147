package loads_test

import (
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/sim"
)

func onlySession(t *testing.T, nd *sim.Node, now time.Time) loads.SessionView {
	t.Helper()
	ss := nd.T.View(now).Sessions
	if len(ss) != 1 {
		t.Fatalf("%s: %d sessions, want 1: %+v", nd.ID, len(ss), ss)
	}
	return ss[0]
}

// TestStaleDialReplacedWhileDialing: a dial that has not connected past
// StaleDial (a SYN into a partition that has healed since) is replaced on
// the next request, not waited out.
func TestStaleDialReplacedWhileDialing(t *testing.T) {
	f := newFleet(t)
	f.net.Latency = time.Millisecond
	const peer = "10.0.0.1:7780"
	f.node(peer, sim.NodeOpts{Policy: health.Domain})
	c := f.node("10.0.0.2:7777", sim.NodeOpts{Policy: health.Domain})
	f.net.Stall(peer) // the SYN waits: the dial stays in progress
	if err := c.T.NewRequest(f.net.Now, "r1", sym("kv1", "10.0.0.1", 7780)); err != nil {
		t.Fatal(err)
	}
	c.T.Lookup(f.net.Now, "r1", nodetest.Key("r1", 0))
	f.net.Advance(5 * time.Millisecond)
	first := onlySession(t, c, f.net.Now)
	f.net.Advance(300 * time.Millisecond)
	if err := c.T.NewRequest(f.net.Now, "r2", sym("kv2", "10.0.0.1", 7780)); err != nil {
		t.Fatal(err)
	}
	c.T.Lookup(f.net.Now, "r2", nodetest.Key("r2", 0))
	if s := onlySession(t, c, f.net.Now); s.Conn == first.Conn {
		t.Fatalf("the dial %v pending for 300ms was not replaced", first.Conn)
	}
}
