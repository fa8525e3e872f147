package loads_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/sim"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// slowHello is a fleet whose producer answers every Hello late: a sidecar
// starved of CPU by spinning vLLM engines (0.3-3 s between its runs were
// measured on a 2-core machine). Its kernel accepts at once, so every
// connect attempt is answered; the handshake waits for its process.
type slowHello struct {
	*fleet
	p, c *sim.Node
}

func newSlowHello(t *testing.T, delay time.Duration) *slowHello {
	f, p, c := newPair(t)
	p.HelloDelay = delay
	return &slowHello{fleet: f, p: p, c: c}
}

const pairProducer = "10.0.0.1:7780"

// newPair is a producer (pairProducer) and a consumer, both under domain,
// 1 ms apart.
func newPair(t *testing.T) (f *fleet, p, c *sim.Node) {
	f = newFleet(t)
	f.net.Latency = time.Millisecond
	p = f.node(pairProducer, sim.NodeOpts{Policy: health.Domain})
	c = f.node("10.0.0.2:7777", sim.NodeOpts{Policy: health.Domain})
	return f, p, c
}

// stream runs a symmetric request to the producer every gap until stop,
// each looking up its two blocks every 10 ms until HIT (then loading them)
// or MISS, and returns how many loaded and how many fell back.
func (s *slowHello) stream(gap, stop time.Duration) (ok, fell int) {
	s.t.Helper()
	type req struct {
		id  string
		ks  []wire.Key
		job uint64
	}
	var live []*req
	for ms := 0; ; ms++ {
		el := time.Duration(ms) * time.Millisecond
		if el < stop && el%gap == 0 {
			r := &req{id: fmt.Sprintf("r%d", ms)}
			r.ks = nodetest.Keys(r.id, 2)
			s.put(s.p, r.ks)
			if err := s.c.T.NewRequest(s.net.Now, r.id, sym("kv-"+r.id, "10.0.0.1", 7780)); err != nil {
				s.t.Fatal(err)
			}
			live = append(live, r)
		} else if el >= stop && len(live) == 0 {
			return ok, fell
		}
		if el > stop+10*time.Second {
			s.t.Fatalf("%d requests still under way 10 s after the last", len(live))
		}
		s.net.Run()
		kept := live[:0]
		for _, r := range live {
			done, loaded := false, false
			switch {
			case r.job != 0:
				if res, got := result(s.c, r.job); got {
					done, loaded = true, res.OK
				}
			case ms%10 == 0:
				v := s.c.T.Lookup(s.net.Now, r.id, r.ks[0])
				if v != session.Miss {
					v = s.c.T.Lookup(s.net.Now, r.id, r.ks[1])
				}
				switch v {
				case session.Miss:
					done = true
				case session.Hit:
					r.job = s.c.T.SubmitLoad(s.net.Now, r.id, r.ks)
				}
			}
			if !done {
				kept = append(kept, r)
				continue
			}
			s.c.T.RequestFinished(s.net.Now, r.id)
			if loaded {
				ok++
			} else {
				fell++
			}
		}
		live = kept
		s.c.T.EndStep(s.net.Now) // as the engine's step does: the lookups go out
		if n := s.c.T.Attempts(s.p.ID); n > 3 {
			s.t.Fatalf("%d connect attempts to the producer, want at most 3", n)
		}
		s.net.Advance(time.Millisecond)
	}
}

// TestStaleDialRacesSlowHandshake: a producer that answers every Hello
// 0.3-2 s late, and a request every 50 ms. Replacing each connect attempt
// after StaleDial (250 ms) meant no handshake ever finished and every
// load fell back; raced, the first attempt's handshake finishes when the
// producer answers it and the requests after it load on it.
func TestStaleDialRacesSlowHandshake(t *testing.T) {
	for _, delay := range []time.Duration{300 * time.Millisecond, 600 * time.Millisecond, time.Second, 2 * time.Second} {
		t.Run(delay.String(), func(t *testing.T) {
			s := newSlowHello(t, delay)
			ok, fell := s.stream(50*time.Millisecond, delay+2*time.Second)
			// The requests made once the first handshake finished load:
			// about 2 s of them at one per 50 ms.
			if ok < 30 {
				t.Fatalf("%d loads, %d fell back: no handshake finished with a producer answering %v late", ok, fell, delay)
			}
			s.net.Advance(100 * time.Millisecond)
			if ss := s.c.T.View(s.net.Now).Sessions; len(ss) != 1 || ss[0].State != loads.SessionReady {
				t.Fatalf("consumer's sessions: %+v, want one ready", ss)
			}
			if ps := s.p.T.View(s.net.Now).Sessions; len(ps) != 1 || ps[0].State != loads.SessionReady {
				t.Fatalf("producer's sessions: %+v, want one ready", ps)
			}
			if n := s.c.T.Attempts(s.p.ID); n != 0 {
				t.Fatalf("%d connect attempts left after the handshake", n)
			}
			t.Logf("%d loads, %d fell back, %d dials", ok, fell, len(s.net.Dials))
		})
	}
}

// TestStaleAnsweredAttemptRacedAfterHeal: the partition case with an
// attempt that connected. The producer's kernel accepted it, then a
// blackhole swallowed its Hello; the blackhole heals. The next request
// past StaleDial dials afresh beside it (the old Hello may never come),
// the fresh attempt's handshake finishes, and the stale one is closed as
// a duplicate: one session on each side, nothing left racing.
func TestStaleAnsweredAttemptRacedAfterHeal(t *testing.T) {
	f, p, c := newPair(t)
	const peer = pairProducer
	if err := c.T.NewRequest(f.net.Now, "r1", sym("kv1", "10.0.0.1", 7780)); err != nil {
		t.Fatal(err)
	}
	c.T.Lookup(f.net.Now, "r1", nodetest.Key("r1", 0)) // dials
	for i := 0; len(p.T.View(f.net.Now).Sessions) == 0; i++ {
		if i > 100 {
			t.Fatal("the producer never accepted")
		}
		f.net.Advance(100 * time.Microsecond)
	}
	p.Silent = true // accepted; the Hellos that follow are swallowed
	f.net.Advance(5 * time.Millisecond)
	first := onlySession(t, c, f.net.Now)
	if _, err := f.net.Heal(peer); err != nil {
		t.Fatal(err)
	}
	f.net.Advance(300 * time.Millisecond) // past StaleDial (250 ms)
	if s := onlySession(t, c, f.net.Now); s.Conn != first.Conn || s.State != loads.SessionConnecting {
		t.Fatalf("before the next request: %+v, want the first attempt %v still pending", s, first.Conn)
	}

	f.put(p, nodetest.Keys("r2", 1))
	if err := c.T.NewRequest(f.net.Now, "r2", sym("kv2", "10.0.0.1", 7780)); err != nil {
		t.Fatal(err)
	}
	if n := c.T.Attempts(peer); n != 2 {
		t.Fatalf("%d connect attempts, want 2: the stale one racing a fresh one", n)
	}
	v := session.Retry
	for i := 0; v == session.Retry; i++ {
		if i > 50 {
			t.Fatal("r2's lookup stayed RETRY for 500 ms")
		}
		v = c.T.Lookup(f.net.Now, "r2", nodetest.Key("r2", 0))
		c.T.EndStep(f.net.Now)
		f.net.Advance(10 * time.Millisecond)
	}
	if v != session.Hit {
		t.Fatalf("r2's lookup: %v, want HIT on the fresh attempt", v)
	}
	s := onlySession(t, c, f.net.Now)
	if s.Conn == first.Conn || s.State != loads.SessionReady {
		t.Fatalf("consumer: %+v, want the fresh attempt ready", s)
	}
	if n := c.T.Attempts(peer); n != 0 {
		t.Fatalf("%d connect attempts left racing", n)
	}
	f.net.Advance(10 * time.Millisecond)
	if ps := p.T.View(f.net.Now).Sessions; len(ps) != 1 || ps[0].State != loads.SessionReady {
		t.Fatalf("producer's sessions: %+v, want the fresh one only", ps)
	}
	if !strings.Contains(f.log.String(), "racing a stale connect attempt") {
		t.Fatal("the stale attempt was not raced")
	}
}

// TestDuplicateHelloRefusedWithoutAck: the accepting side refuses a second
// Hello from a peer whose first session it kept, and sends it no HelloAck
// first: the dialer's racing attempt it belongs to must never look ready
// (it would win the race and close the session the producer kept).
func TestDuplicateHelloRefusedWithoutAck(t *testing.T) {
	f := newFleet(t)
	p := f.node("10.0.0.1:7780", sim.NodeOpts{Policy: health.Domain})
	hello := func() *wire.Hello {
		return &wire.Hello{Version: wire.Version, PeerID: "10.0.0.2:7777", Incarnation: 1,
			BlockBytes: blockBytes, MaxInflight: 64, MaxFrame: 4 << 20}
	}
	acked := func(id loads.ConnID) (ack, bye bool) {
		for _, a := range p.T.TakeEffects().Actions {
			if a.Conn != id || a.Kind != loads.ActSend {
				continue
			}
			switch m := a.Msg.(type) {
			case *wire.HelloAck:
				ack = true
			case *wire.Goodbye:
				bye = bye || m.Reason == wire.GoodbyeDuplicate
			}
		}
		return ack, bye
	}
	now := f.net.Now
	first := p.T.Accept(now)
	p.T.Receive(now, first, hello())
	if ack, bye := acked(first); !ack || bye {
		t.Fatalf("first Hello: ack %v, goodbye %v; want acked", ack, bye)
	}
	second := p.T.Accept(now)
	p.T.Receive(now, second, hello())
	if ack, bye := acked(second); ack || !bye {
		t.Fatalf("second Hello: ack %v, goodbye(duplicate) %v; want refused without an ack", ack, bye)
	}
}

// TestRacersNotCountedAgainstMaxPeers: racing attempts are one peer's, so
// they take one place among max_peers, as the attempt they race did: with
// max_peers 2, a consumer racing attempts to a slow producer still dials a
// second producer; once the race is won the table's live count (checked
// against a full count every tick: CheckTimers) holds the winner and the
// second session.
func TestRacersNotCountedAgainstMaxPeers(t *testing.T) {
	f := newFleet(t)
	f.net.Latency = time.Millisecond
	tm := loads.PresetTimers(health.Domain)
	tm.MaxPeers = 2
	slow := f.node("10.0.0.1:7780", sim.NodeOpts{Policy: health.Domain})
	slow.HelloDelay = time.Second
	fast := f.node("10.0.0.3:7780", sim.NodeOpts{Policy: health.Domain})
	c := f.node("10.0.0.2:7777", sim.NodeOpts{Policy: health.Domain, Timers: &tm})
	for i, at := range []time.Duration{0, 300 * time.Millisecond, 600 * time.Millisecond} {
		f.net.Advance(at - f.net.Now.Sub(t0))
		id := fmt.Sprintf("s%d", i)
		if err := c.T.NewRequest(f.net.Now, id, sym("kv-"+id, "10.0.0.1", 7780)); err != nil {
			t.Fatal(err)
		}
		f.net.Run()
	}
	if n := c.T.Attempts(slow.ID); n != 3 {
		t.Fatalf("%d attempts to the slow producer, want 3 (two racing)", n)
	}
	f.put(fast, nodetest.Keys("f", 1))
	if err := c.T.NewRequest(f.net.Now, "f", sym("kv-f", "10.0.0.3", 7780)); err != nil {
		t.Fatal(err)
	}
	v := session.Retry
	for i := 0; v == session.Retry && i < 50; i++ {
		v = c.T.Lookup(f.net.Now, "f", nodetest.Key("f", 0))
		c.T.EndStep(f.net.Now)
		f.net.Advance(10 * time.Millisecond)
	}
	if v != session.Hit {
		t.Fatalf("lookup on the second producer: %v, want HIT (racers took the peer cap?)", v)
	}
	f.net.Advance(time.Second) // the slow producer answers the first attempt
	ready := 0
	for _, s := range c.T.View(f.net.Now).Sessions {
		if s.State == loads.SessionReady {
			ready++
		}
	}
	if ready != 2 || c.T.Attempts(slow.ID) != 0 {
		t.Fatalf("%d ready sessions and %d attempts left, want 2 and 0: %+v", ready, c.T.Attempts(slow.ID), c.T.View(f.net.Now).Sessions)
	}
}

// TestPromotedRacerWaitedOn: the order seen once through a test proxy with
// real engines (the OpenAI case, vLLM's CPU build). The request's connect
// attempt goes stale (its Hello answered late), so a fresh one races it;
// the producer reads the old Hello first, keeps that attempt and refuses
// the fresh one as a duplicate, and the refusal reaches the consumer
// before the old attempt's HelloAck does. The old attempt takes the fresh
// one's place (promoteRacer); it is the one the producer kept, and the
// request must wait on it within its budget, not fall back because that
// attempt is older than the handshake wait.
func TestPromotedRacerWaitedOn(t *testing.T) {
	f, p, c := newPair(t)
	p.HelloDelay = 200 * time.Millisecond // the old Hello is read at ~201 ms
	ks := nodetest.Keys("r1", 2)
	f.put(p, ks)
	if err := c.T.NewRequest(f.net.Now, "r1", sym("kv1", "10.0.0.1", 7780)); err != nil {
		t.Fatal(err)
	}
	var job uint64
	start := f.net.Now
	for job == 0 {
		el := f.net.Now.Sub(start)
		switch el {
		case 190 * time.Millisecond:
			// The producer's HelloAck (sent at ~201 ms) arrives at ~401 ms.
			p.ExtraDelay = 200 * time.Millisecond
		case 240 * time.Millisecond:
			// The fresh attempt (dialed at 250 ms) is refused as a
			// duplicate at once: its refusal arrives first.
			p.ExtraDelay, p.HelloDelay = 0, 0
		}
		if el > time.Second {
			t.Fatal("r1's lookups stayed RETRY for a second")
		}
		if el%(10*time.Millisecond) == 0 {
			hits := 0
			for _, k := range ks {
				switch c.T.Lookup(f.net.Now, "r1", k) {
				case session.Miss:
					t.Fatalf("r1 fell back at %v:\n%s", el, f.log.String())
				case session.Hit:
					hits++
				}
			}
			if hits == len(ks) {
				job = c.T.SubmitLoad(f.net.Now, "r1", ks)
			}
			c.T.EndStep(f.net.Now)
		}
		f.net.Run()
		f.net.Advance(time.Millisecond)
	}
	for _, want := range []string{"racing a stale connect attempt", "the current connect attempt ended: a racing one takes its place"} {
		if !strings.Contains(f.log.String(), want) {
			t.Fatalf("the log does not say %q: the order under test did not happen:\n%s", want, f.log.String())
		}
	}
	var res loads.JobResult
	for got := false; !got; {
		if f.net.Now.Sub(start) > 2*time.Second {
			t.Fatal("the load did not finish")
		}
		c.T.EndStep(f.net.Now)
		f.net.Run()
		f.net.Advance(time.Millisecond)
		res, got = result(c, job)
	}
	if !res.OK {
		t.Fatalf("load: %+v", res)
	}
	f.verify(c, ks)
	c.T.RequestFinished(f.net.Now, "r1")
	f.net.Run()
	f.settled(c)
}
