package loads_test

import (
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/sim"
)

// groupFixture is PR #64678's TestGroupPeersByHost setup: a consumer with a
// session to 10.0.0.1:7777 (about to die), 10.0.0.1:7778 and 10.0.0.2:7777,
// each with one PD load in flight (decoder first: nothing stored yet).
type groupFixture struct {
	*fleet
	c     *sim.Node
	jobs  map[string]uint64 // peer -> job
	kvIDs map[string]string // peer -> kv id
}

func newGroupFixture(t *testing.T, policy string) *groupFixture {
	f := newFleet(t)
	g := &groupFixture{fleet: f, jobs: map[string]uint64{}, kvIDs: map[string]string{}}
	for _, id := range []string{"10.0.0.1:7777", "10.0.0.1:7778", "10.0.0.1:7779", "10.0.0.2:7777"} {
		f.node(id, sim.NodeOpts{Policy: policy})
	}
	g.c = f.node("10.0.0.3:7777", sim.NodeOpts{Policy: policy})
	for i, peer := range []string{"10.0.0.1:7777", "10.0.0.1:7778", "10.0.0.2:7777"} {
		host, port := nodetest.SplitPeer(t, peer)
		kv := "kv-" + peer
		req := "req-" + peer
		if err := g.c.T.NewRequest(f.net.Now, req, pd(kv, host, port)); err != nil {
			t.Fatal(err)
		}
		f.net.Run()
		if v := g.c.T.Lookup(f.net.Now, req, nodetest.Key("x", i)); v != session.Hit {
			t.Fatalf("lookup to %s = %v, want HIT", peer, v)
		}
		g.jobs[peer] = g.c.T.SubmitLoad(f.net.Now, req, nodetest.Keys("x"+peer, 2))
		g.kvIDs[peer] = kv
	}
	f.net.Run()
	for peer, j := range g.jobs {
		if _, done := result(g.c, j); done {
			t.Fatalf("load to %s finished before the fault", peer)
		}
	}
	return g
}

func (g *groupFixture) kill(peer string) {
	g.net.Crash(peer) // its connections reset: one reap on the consumer
}

func (g *groupFixture) failed(peer string) bool {
	r, ok := result(g.c, g.jobs[peer])
	if ok && r.OK {
		g.t.Fatalf("load to %s succeeded", peer)
	}
	return ok
}

// dialsTo counts the dials to host since the net had made `from` dials.
func dialsTo(n *sim.Net, host string, from int) int {
	c := 0
	for _, d := range n.Dials[from:] {
		if strings.HasPrefix(d.To, host+":") {
			c++
		}
	}
	return c
}

// TestHostGroupDeadPeerFailsLoadsToOtherPortsOnItsHost pins PR #64678's first
// claim: one reap fails the loads to both 10.0.0.1 ports, both request ids
// are failed (lookup MISS), 10.0.0.2:7777 is untouched, the log names the
// dead peer.
func TestHostGroupDeadPeerFailsLoadsToOtherPortsOnItsHost(t *testing.T) {
	g := newGroupFixture(t, health.HostGroup)
	g.kill("10.0.0.1:7777")
	if !g.failed("10.0.0.1:7777") || !g.failed("10.0.0.1:7778") {
		t.Fatal("the loads to both 10.0.0.1 ports must fail in the same reap")
	}
	if g.failed("10.0.0.2:7777") {
		t.Fatal("the load to 10.0.0.2:7777 must stay in flight")
	}
	for _, peer := range []string{"10.0.0.1:7777", "10.0.0.1:7778"} {
		if !g.c.T.Failed(g.kvIDs[peer]) {
			t.Fatalf("kv id of %s not in the failed set", peer)
		}
		if v := g.c.T.Lookup(g.net.Now, "req-"+peer, nodetest.Key("x", 9)); v != session.Miss {
			t.Fatalf("lookup for %s = %v, want MISS", peer, v)
		}
	}
	if g.c.T.Failed(g.kvIDs["10.0.0.2:7777"]) {
		t.Fatal("10.0.0.2:7777's request must not be failed")
	}
	logs := g.log.String()
	if !strings.Contains(logs, `msg="peer down" node=10.0.0.3:7777 peer=10.0.0.1:7777 cause=conn-reset loads_failed=1`) {
		t.Fatalf("no peer-down line naming the dead peer:\n%s", logs)
	}
	if !strings.Contains(logs, "dead_peer=10.0.0.1:7777") {
		t.Fatalf("the sibling's close does not name the dead peer:\n%s", logs)
	}
	// The survivor still completes.
	p := g.net.Node("10.0.0.2:7777")
	p.T.NewRequest(g.net.Now, "p", decoder(g.kvIDs["10.0.0.2:7777"]))
	ks := nodetest.Keys("x10.0.0.2:7777", 2)
	g.put(p, ks)
	p.T.SubmitStore(g.net.Now, "p", ks)
	if r := g.mustResult(g.c, g.jobs["10.0.0.2:7777"]); !r.OK {
		t.Fatalf("the untouched load failed: %+v", r)
	}
}

// TestHostGroupNewRequestToQuarantinedHostPrefillsLocally pins the second
// claim: for 10 s no new outbound session to any port of the host; a new PD
// request naming 10.0.0.1:7779 opens no connection and falls back; after the
// quarantine the host is dialed again.
func TestHostGroupNewRequestToQuarantinedHostPrefillsLocally(t *testing.T) {
	g := newGroupFixture(t, health.HostGroup)
	g.kill("10.0.0.1:7777")
	at := len(g.net.Dials)
	g.c.T.NewRequest(g.net.Now, "new", pd("kv-new", "10.0.0.1", 7779))
	g.net.Run()
	if n := dialsTo(g.net, "10.0.0.1", at); n != 0 {
		t.Fatalf("%d dials to the quarantined host, want 0", n)
	}
	if v := g.c.T.Lookup(g.net.Now, "new", nodetest.Key("y", 0)); v != session.Miss {
		t.Fatalf("lookup = %v, want MISS", v)
	}
	g.net.Advance(9 * time.Second)
	g.c.T.NewRequest(g.net.Now, "new2", pd("kv-new2", "10.0.0.1", 7779))
	g.net.Run()
	if n := dialsTo(g.net, "10.0.0.1", at); n != 0 {
		t.Fatalf("dialed the host inside its quarantine")
	}
	g.net.Advance(time.Second)
	g.c.T.NewRequest(g.net.Now, "new3", pd("kv-new3", "10.0.0.1", 7779))
	g.net.Run()
	if n := dialsTo(g.net, "10.0.0.1", at); n != 1 {
		t.Fatalf("%d dials to the host after its quarantine, want 1", n)
	}
	if v := g.c.T.Lookup(g.net.Now, "new3", nodetest.Key("y", 0)); v != session.Hit {
		t.Fatalf("lookup after the quarantine = %v, want HIT", v)
	}
}

// TestHostGroupAcceptsInboundDuringQuarantine: the quarantine only blocks
// outbound sessions; a sibling that dials us is accepted.
func TestHostGroupAcceptsInboundDuringQuarantine(t *testing.T) {
	g := newGroupFixture(t, health.HostGroup)
	g.kill("10.0.0.1:7777")
	sib := g.net.Node("10.0.0.1:7779")
	sib.T.NewRequest(g.net.Now, "in", pd("kv-in", "10.0.0.3", 7777))
	g.net.Run()
	if v := sib.T.Lookup(g.net.Now, "in", nodetest.Key("z", 0)); v != session.Hit {
		t.Fatalf("inbound session from the quarantined host refused: lookup %v", v)
	}
}

// TestPerPeerReapsOnlyTheDeadSession pins "off by default": under per-peer
// the 10.0.0.1:7778 load is still in flight after the reap and a new
// request to the host connects, as on vLLM main.
func TestPerPeerReapsOnlyTheDeadSession(t *testing.T) {
	g := newGroupFixture(t, health.PerPeer)
	at := len(g.net.Dials)
	g.kill("10.0.0.1:7777")
	if !g.failed("10.0.0.1:7777") {
		t.Fatal("the dead peer's load must fail")
	}
	if g.failed("10.0.0.1:7778") || g.failed("10.0.0.2:7777") {
		t.Fatal("per-peer must leave the other sessions' loads in flight")
	}
	g.c.T.NewRequest(g.net.Now, "new", pd("kv-new", "10.0.0.1", 7779))
	g.net.Run()
	if n := dialsTo(g.net, "10.0.0.1", at); n != 1 {
		t.Fatalf("%d dials to the host, want 1", n)
	}
	if v := g.c.T.Lookup(g.net.Now, "new", nodetest.Key("y", 0)); v != session.Hit {
		t.Fatalf("lookup = %v, want HIT", v)
	}
	// And the sibling's load then runs to its PD load timeout (#56828).
	g.net.Advance(29 * time.Second)
	if g.failed("10.0.0.1:7778") {
		t.Fatal("failed before the PD load timeout")
	}
	g.net.Advance(time.Second)
	if !g.failed("10.0.0.1:7778") {
		t.Fatal("not failed at the PD load timeout")
	}
	if !strings.Contains(g.log.String(), "load timed out peer=10.0.0.1:7778 req=kv-10.0.0.1:7778 round=0 job_id=") {
		t.Fatalf("no load-timeout line:\n%s", g.log.String())
	}
}

// TestHostGroupMisfiresOnIdleEviction reproduces the review's objection: an
// idle eviction takes the whole host down under host-group, never under
// per-peer.
func TestHostGroupMisfiresOnIdleEviction(t *testing.T) {
	for _, pol := range []string{health.HostGroup, health.PerPeer} {
		t.Run(pol, func(t *testing.T) {
			f := newFleet(t)
			f.node("10.0.0.1:7777", sim.NodeOpts{Policy: pol})
			f.node("10.0.0.1:7778", sim.NodeOpts{Policy: pol})
			c := f.node("10.0.0.3:7777", sim.NodeOpts{Policy: pol})
			f.connect(c, "10.0.0.1", 7777)
			f.net.Advance(290 * time.Second)
			c.T.NewRequest(f.net.Now, "busy", pd("kv-busy", "10.0.0.1", 7778))
			f.net.Run()
			j := c.T.SubmitLoad(f.net.Now, "busy", nodetest.Keys("b", 1))
			f.net.Advance(11 * time.Second) // 7777 idles out at 300 s; the load is 11 s old
			_, done := result(c, j)
			if want := pol == health.HostGroup; done != want {
				t.Fatalf("%s: busy sibling's load failed=%v after an idle eviction, want %v", pol, done, want)
			}
		})
	}
}
