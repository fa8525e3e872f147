package loads_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/sim"
)

// podFixture: a consumer with ready sessions to the 8 ranks of pod-a
// (10.0.0.1:7777-7784, domain pod-a) and the 2 ranks of pod-b
// (10.0.0.1:8777-8778, domain pod-b), each with one PD load in flight.
type podFixture struct {
	*fleet
	c    *sim.Node
	jobs map[string]uint64
	seq  int
}

func podPeers() []string {
	var ps []string
	for r := 0; r < 8; r++ {
		ps = append(ps, fmt.Sprintf("10.0.0.1:%d", 7777+r))
	}
	return append(ps, "10.0.0.1:8777", "10.0.0.1:8778")
}

func domainOf(peer string) string {
	if peer >= "10.0.0.1:8" {
		return "pod-b"
	}
	return "pod-a"
}

func newPodFixture(t *testing.T, policy string) *podFixture {
	f := newFleet(t)
	g := &podFixture{fleet: f, jobs: map[string]uint64{}}
	for _, p := range podPeers() {
		f.node(p, sim.NodeOpts{Policy: policy, Domain: domainOf(p)})
	}
	g.c = f.node("10.0.0.2:7777", sim.NodeOpts{Policy: policy})
	for _, p := range podPeers() {
		g.jobs[p] = g.load(p)
	}
	return g
}

// load starts a PD load to peer (decoder first: it stays in flight until
// the producer stores) and returns its job, or 0 if the lookup fell back.
func (g *podFixture) load(peer string) uint64 {
	g.t.Helper()
	g.seq++
	host, port := nodetest.SplitPeer(g.t, peer)
	req := fmt.Sprintf("r%d", g.seq)
	p := pd("kv-"+req, host, port)
	p.RemotePrefiller.RemoteDomain = domainOf(peer)
	if err := g.c.T.NewRequest(g.net.Now, req, p); err != nil {
		g.t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		g.net.Run()
		switch g.c.T.Lookup(g.net.Now, req, nodetest.Key(req, 0)) {
		case session.Hit:
			return g.c.T.SubmitLoad(g.net.Now, req, nodetest.Keys(req, 2))
		case session.Miss:
			return 0
		}
		g.net.Advance(10 * time.Millisecond)
	}
	g.t.Fatalf("lookup to %s stayed RETRY for 1 s", peer)
	return 0
}

func (g *podFixture) done(job uint64) bool {
	_, ok := result(g.c, job)
	return ok
}

// TestDomainPodPartial is vLLM #56828 under the domain policy: rank 0's
// connections reset, ranks 1-7's data path goes silent. Every load to the
// pod fails within the probe timeout; pod-b, co-located, is untouched; a new
// request to a silent rank falls back quickly; after the heal the ranks are
// used again at once (no ejection, no false fallback).
func TestDomainPodPartial(t *testing.T) {
	g := newPodFixture(t, health.Domain)
	for _, p := range podPeers()[1:8] {
		g.net.Node(p).DataBlackhole = true
	}
	g.net.CloseControl("10.0.0.1:7777")
	g.net.Advance(300 * time.Millisecond) // > probe timeout
	for _, p := range podPeers()[:8] {
		if !g.done(g.jobs[p]) {
			t.Fatalf("load to %s still in flight 300 ms after the pod failed", p)
		}
	}
	for _, p := range podPeers()[8:] {
		if g.done(g.jobs[p]) {
			t.Fatalf("load to co-located %s failed", p)
		}
	}
	// A new request to a silent rank: the domain is suspect, the new
	// session proves its data path first, fails, and the request falls back.
	start := g.net.Now
	if j := g.load("10.0.0.1:7780"); j != 0 {
		g.net.Advance(2 * time.Second)
		if r, ok := result(g.c, j); !ok || r.OK {
			t.Fatalf("load to a silent rank: %+v %v", r, ok)
		}
	}
	if took := g.net.Now.Sub(start); took > 1500*time.Millisecond {
		t.Fatalf("fallback took %v", took)
	}
	// Rank 0 only lost its connections: it is used again.
	if j := g.load("10.0.0.1:7777"); j == 0 {
		t.Fatal("rank 0 (process alive) refused after its reset")
	}
	// Heal: the ranks serve again at once.
	for _, p := range podPeers()[1:8] {
		g.net.Node(p).DataBlackhole = false
	}
	g.net.Advance(100 * time.Millisecond)
	j := g.load("10.0.0.1:7780")
	if j == 0 {
		t.Fatalf("healed rank refused:\n%s", g.log.String()[max(0, len(g.log.String())-3000):])
	}
	prod := g.net.Node("10.0.0.1:7780")
	prod.T.NewRequest(g.net.Now, "p", decoder(fmt.Sprintf("kv-r%d", g.seq)))
	ks := nodetest.Keys(fmt.Sprintf("r%d", g.seq), 2)
	g.put(prod, ks)
	prod.T.SubmitStore(g.net.Now, "p", ks)
	if r := g.mustResult(g.c, j); !r.OK {
		t.Fatalf("load after heal: %+v", r)
	}
}

// TestDomainIgnoresOrderlyEnds: idle eviction (Goodbye) and a refused
// handshake never touch siblings under the domain policy.
func TestDomainIgnoresOrderlyEnds(t *testing.T) {
	g := newPodFixture(t, health.Domain)
	// An orderly end of rank 0's session, as an idle eviction.
	g.net.Node("10.0.0.1:7777").T.Shutdown(g.net.Now)
	g.net.Advance(5 * time.Second)
	for _, p := range podPeers()[1:] {
		if g.done(g.jobs[p]) {
			t.Fatalf("load to %s failed after a sibling's orderly goodbye", p)
		}
	}
}

var _ = loads.JobLoad

// TestDomainDeliveringSiblingKept (issue 24): ranks 1 and 2 of pod-a have
// their data path cut, so their probe answers never come; rank 1's data
// connection still delivers (its bytes are reported as they land), rank
// 2's is silent. When rank 0 crashes, rank 2 is closed at the probe
// timeout and rank 1 keeps its session and its load: the table tells the
// policy of rank 1's data while it is checked, and the policy renews its
// check instead of failing it.
func TestDomainDeliveringSiblingKept(t *testing.T) {
	g := newPodFixture(t, health.Domain)
	slow, silent := "10.0.0.1:7778", "10.0.0.1:7779"
	g.net.Node(slow).DataBlackhole = true
	g.net.Node(silent).DataBlackhole = true
	var conn loads.ConnID
	for _, s := range g.c.T.View(g.net.Now).Sessions {
		if s.Peer == slow {
			conn = s.Conn
		}
	}
	if conn == 0 {
		t.Fatal("no session to the slow rank")
	}
	g.net.Crash("10.0.0.1:7777")
	for i := 1; i <= 50; i++ { // 1 s of its bytes, every 20 ms
		g.net.Advance(20 * time.Millisecond)
		g.c.T.DataProgress(g.net.Now, conn, g.jobs[slow], uint64(i))
		g.net.Flush(g.c)
	}
	if !g.done(g.jobs[silent]) {
		t.Fatal("the silent sibling's load is still in flight 1 s after the crash")
	}
	if g.done(g.jobs[slow]) {
		r, _ := result(g.c, g.jobs[slow])
		t.Fatalf("the delivering sibling's load failed: %+v", r)
	}
	v := g.c.T.View(g.net.Now)
	if v.Policy.ProbesRenewed == 0 || v.Policy.ProbesFailed != 1 {
		t.Fatalf("policy stats %+v: want renewals and one failed probe (the silent rank's)", v.Policy)
	}
	// Its bytes stop: it is closed one silence window (the stall timeout,
	// 1 s) after its last data, not kept for good.
	g.net.Advance(900 * time.Millisecond)
	if g.done(g.jobs[slow]) {
		t.Fatal("the delivering sibling was closed 900 ms after its last data: sooner than the stall timeout")
	}
	g.net.Advance(200 * time.Millisecond)
	if !g.done(g.jobs[slow]) {
		t.Fatal("a sibling silent for 1.1 s after its last data kept its load")
	}
}
