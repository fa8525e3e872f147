package loads_test

import (
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/sim"
)

// Slow is its own state (issue 24 item 3): scripted, on the simulator's
// network, under the domain policy with kvp2p's timers and a 3 s PD load
// timeout (the judgment needs a deadline the scripts can reach quickly).

const slowLoadTimeout = 3 * time.Second

// slowFixture is a consumer and a producer whose outgoing data runs at bps.
type slowFixture struct {
	*fleet
	c, p *sim.Node
	seq  int
}

func newSlowFixture(t *testing.T, bps int64) *slowFixture {
	return newSlowFixtureTimeout(t, bps, slowLoadTimeout)
}

func newSlowFixtureTimeout(t *testing.T, bps int64, loadTimeout time.Duration) *slowFixture {
	f := newFleet(t)
	tm := loads.PresetTimers(health.Domain)
	tm.LoadTimeoutPD = loadTimeout
	o := sim.NodeOpts{Policy: health.Domain, Timers: &tm, Domain: "pod-a"}
	g := &slowFixture{fleet: f, p: f.node("10.0.0.1:7777", o)}
	o.Domain = ""
	g.c = f.node("10.0.0.2:7777", o)
	f.net.Latency = time.Millisecond
	// A small send buffer: an aborted load's bytes already in it still
	// cross the slow link before the next load's (as TCP's would), and
	// the scripts want the next load soon after.
	f.net.SendBuffer = 16 << 10
	f.connect(g.c, "10.0.0.1", 7777)
	g.p.SlowBps = bps
	return g
}

// load starts a PD load of n blocks from the producer, the producer's
// blocks stored first, and returns its job and when it was submitted.
func (g *slowFixture) load(n int) (uint64, time.Time) {
	g.t.Helper()
	g.seq++
	id := string(rune('a' + g.seq))
	ks := nodetest.Keys(id, n)
	g.put(g.p, ks)
	now := g.net.Now
	if err := g.p.T.NewRequest(now, "p"+id, decoder("kv"+id)); err != nil {
		g.t.Fatal(err)
	}
	g.p.T.SubmitStore(now, "p"+id, ks)
	p := pd("kv"+id, "10.0.0.1", 7777)
	p.RemotePrefiller.RemoteDomain = "pod-a"
	if err := g.c.T.NewRequest(now, "d"+id, p); err != nil {
		g.t.Fatal(err)
	}
	for i := 0; ; i++ {
		g.net.Run()
		v := g.c.T.Lookup(g.net.Now, "d"+id, ks[0])
		if v == session.Hit {
			break
		}
		if v == session.Miss || i > 100 {
			g.t.Fatalf("PD lookup: %v after %d steps", v, i)
		}
		g.net.Advance(10 * time.Millisecond)
	}
	return g.c.T.SubmitLoad(g.net.Now, "d"+id, ks), g.net.Now
}

// until advances in 10 ms steps until job has a result or d passed.
func (g *slowFixture) until(job uint64, d time.Duration) (loads.JobResult, bool) {
	for end := g.net.Now.Add(d); g.net.Now.Before(end); {
		g.net.Advance(10 * time.Millisecond)
		if r, ok := result(g.c, job); ok {
			return r, true
		}
	}
	return loads.JobResult{}, false
}

// session is the consumer's one session to the producer.
func (g *slowFixture) session() loads.SessionView {
	g.t.Helper()
	v := g.c.T.View(g.net.Now)
	var out []loads.SessionView
	for _, s := range v.Sessions {
		if s.Peer == "10.0.0.1:7777" {
			out = append(out, s)
		}
	}
	if len(out) != 1 {
		g.t.Fatalf("sessions to the producer: %+v", out)
	}
	return out[0]
}

// peer is the policy's view of the producer.
func (g *slowFixture) peer() health.PeerView {
	g.t.Helper()
	for _, d := range g.c.T.View(g.net.Now).Domains {
		for _, p := range d.Peers {
			if p.ID == "10.0.0.1:7777" {
				if d.State != health.StateOK {
					g.t.Fatalf("the producer's domain is %s", d.State)
				}
				return p
			}
		}
	}
	g.t.Fatal("the policy does not know the producer")
	return health.PeerView{}
}

// TestSlowLoadFallsBackDeliberately: 64 blocks at 16 KiB/s need 16 s and
// the load has 3: once it has delivered for a window, the consumer fails
// it (ReasonSlow) long before its deadline. The session stays, shown slow;
// the peer is neither suspected nor ejected; a load on the same session
// ahead of it finished, and a load after it goes on the same session.
func TestSlowLoadFallsBackDeliberately(t *testing.T) {
	g := newSlowFixture(t, 16<<10)
	first, _ := g.load(2) // 0.5 s at this rate: ahead of the slow one
	job, _ := g.load(64)
	if r, ok := g.until(first, slowLoadTimeout); !ok || !r.OK {
		t.Fatalf("the load ahead: %+v (%v)", r, ok)
	}
	at := g.net.Now // the slow load's bytes start now
	r, ok := g.until(job, slowLoadTimeout)
	if !ok {
		t.Fatalf("no result within the load timeout\n%s", tail(g.log.String()))
	}
	if r.OK || r.Reason != session.ReasonSlow || !session.Deliberate(r.Reason) {
		t.Fatalf("result %+v, want a deliberate failure (%q)", r, session.ReasonSlow)
	}
	if took := g.net.Now.Sub(at); took > time.Second {
		t.Fatalf("deliberate fallback %v after its first bytes: the judgment needs one window (500 ms) of bytes", took)
	}
	if r.Bytes == 0 {
		t.Fatal("judged before any byte arrived")
	}
	s := g.session()
	if s.State != loads.SessionReady || !s.Slow {
		t.Fatalf("session after the fallback: %+v, want ready and slow", s)
	}
	if n := g.c.T.View(g.net.Now).SlowSessions; n != 1 {
		t.Fatalf("SlowSessions = %d, want 1", n)
	}
	if p := g.peer(); !p.Live || p.Probing || p.Faults != 0 || p.EjectedFor != 0 {
		t.Fatalf("policy's view of a slow peer: %+v, want live, not probed, no fault", p)
	}
	if !g.c.T.Failed("kv" + string(rune('a'+g.seq))) {
		t.Fatal("the request is not marked failed: its lookups would not fall back")
	}
	// A new load is answered HIT and goes on the same session: no redial.
	dials := len(g.net.Dials)
	next, _ := g.load(1)
	g.net.Advance(100 * time.Millisecond)
	if r, ok := result(g.c, next); ok && !r.OK {
		t.Fatalf("a load after the fallback failed at once: %+v", r)
	}
	if s2 := g.session(); s2.Conn != s.Conn || s2.State != loads.SessionReady || len(g.net.Dials) != dials {
		t.Fatalf("session after the next load: %+v (dials %d -> %d), want %d, ready, no dial", s2, dials, len(g.net.Dials), s.Conn)
	}
	// The failed load's bytes already queued still cross the slow link
	// (the simulator queues a job's bytes whole: 15 s of them here), its
	// terminal frame after them. The producer acked the abort long before:
	// the consumer waits for that frame while the link delivers, and does
	// not end the session for it (client.draining).
	g.net.Advance(20 * time.Second)
	if s2 := g.session(); s2.Conn != s.Conn || s2.State != loads.SessionReady {
		t.Fatalf("session after the drain: %+v, want %d, ready\n%s", s2, s.Conn, tail(g.log.String()))
	}
	if p := g.peer(); p.Faults != 0 {
		t.Fatalf("policy's view after the drain: %+v", p)
	}
	g.settled(g.c)
}

// TestSlowStateEnds: the slow state is held for a few windows after the
// last slow judgment (a scrape between loads sees it), then ends.
func TestSlowStateEnds(t *testing.T) {
	g := newSlowFixture(t, 16<<10)
	job, _ := g.load(16) // 4 s at this rate, of 3
	if r, ok := g.until(job, slowLoadTimeout); !ok || r.Reason != session.ReasonSlow {
		t.Fatalf("result %+v (%v)", r, ok)
	}
	g.p.SlowBps = 0 // the link recovers; the aborted load's bytes drain
	g.net.Advance(1500 * time.Millisecond)
	if !g.session().Slow {
		t.Fatal("not slow 1.5 s after the slow judgment (held for 2 s)")
	}
	g.net.Advance(600 * time.Millisecond)
	if s := g.session(); s.Slow || s.State != loads.SessionReady {
		t.Fatalf("2.1 s after the last slow judgment: %+v, want ready, not slow", s)
	}
}

// TestSlowLoadThatFinishesWaits: 64 blocks at 100 KB/s need about 2.6 s of
// a 3 s budget. At first the projection, with its margin, is past the
// deadline (reported slow); it never is without the margin: the load is
// not failed, and finishes.
func TestSlowLoadThatFinishesWaits(t *testing.T) {
	g := newSlowFixture(t, 100_000)
	job, _ := g.load(64)
	g.net.Advance(800 * time.Millisecond)
	if _, ok := result(g.c, job); ok {
		t.Fatal("the load ended early")
	}
	if s := g.session(); !s.Slow {
		t.Fatalf("session at 0.8 s: %+v, want slow (2.6 s of 3 s with a 5/4 margin)", s)
	}
	r, ok := g.until(job, slowLoadTimeout)
	if !ok || !r.OK {
		t.Fatalf("a slow load that can finish: %+v (result %v)\n%s", r, ok, tail(g.log.String()))
	}
	if p := g.peer(); p.Faults != 0 || p.EjectedFor != 0 {
		t.Fatalf("policy's view: %+v", p)
	}
}

// TestSlowJudgmentOffUnderVLLMTimers: vLLM's timers have no slow judgment
// (SlowWindow 0): the same hopeless load waits for its load timeout.
func TestSlowJudgmentOffUnderVLLMTimers(t *testing.T) {
	f := newFleet(t)
	tm := loads.PresetTimers(health.PerPeer)
	tm.LoadTimeoutPD = slowLoadTimeout
	o := sim.NodeOpts{Policy: health.PerPeer, Timers: &tm}
	g := &slowFixture{fleet: f, p: f.node("10.0.0.1:7777", o), c: f.node("10.0.0.2:7777", o)}
	f.connect(g.c, "10.0.0.1", 7777)
	g.p.SlowBps = 16 << 10
	job, at := g.load(64)
	r, ok := g.until(job, slowLoadTimeout+time.Second)
	if !ok || r.OK || r.Reason == session.ReasonSlow || g.net.Now.Sub(at) < slowLoadTimeout {
		t.Fatalf("result %+v (%v) after %v, want the load timeout", r, ok, g.net.Now.Sub(at))
	}
}

// TestSlowStallTakesTheStallPath: a slow load whose bytes stop is not
// judged slow (nothing arrives to judge): the progress watchdog ends the
// session as before, and the result says so.
func TestSlowStallTakesTheStallPath(t *testing.T) {
	g := newSlowFixture(t, 100_000)
	job, _ := g.load(64)
	g.net.Advance(300 * time.Millisecond) // some bytes, less than a window
	g.p.DataBlackhole = true
	r, ok := g.until(job, slowLoadTimeout)
	if !ok {
		t.Fatal("no result")
	}
	if r.OK || r.Reason == session.ReasonSlow || session.Deliberate(r.Reason) ||
		!strings.Contains(r.Reason, health.CauseProgressStall.String()) {
		t.Fatalf("result %+v, want the progress watchdog's end of the session", r)
	}
}

// TestQueuedBehindSlowLoadStartBudget: a load queued behind a long one on
// a slow link (the producer has its blocks and sends the other first:
// Progress{Queued}, which the simulator now sends as the data path does)
// falls back deliberately at its start budget, not at its load timeout;
// the long load, which can finish, goes on and does.
func TestQueuedBehindSlowLoadStartBudget(t *testing.T) {
	g := newSlowFixtureTimeout(t, 16<<10, 30*time.Second)
	long, _ := g.load(40) // 10 s at this rate, of 30
	queued, at := g.load(1)
	r, ok := g.until(queued, 10*time.Second)
	if !ok || r.OK || r.Reason != session.ReasonStartBudget || !session.Deliberate(r.Reason) {
		t.Fatalf("queued load: %+v (%v), want its start budget", r, ok)
	}
	// The budget runs from the first Queued frame received, which waits
	// behind the send buffer's bytes (16 KiB: a second at this rate).
	if took := g.net.Now.Sub(at); took < 2*time.Second || took > 4*time.Second {
		t.Fatalf("start budget fired after %v, want 2 s after its first Queued frame", took)
	}
	if r, ok := g.until(long, 12*time.Second); !ok || !r.OK {
		t.Fatalf("the long load: %+v (%v)", r, ok)
	}
	if p := g.peer(); p.Faults != 0 || p.EjectedFor != 0 {
		t.Fatalf("policy's view: %+v", p)
	}
}
