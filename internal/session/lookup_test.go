package session

import (
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/nodetest/testkeys"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// slowLink drives a pair whose producer answers lookups `delay` after they
// were sent; every step the consumer registers one new key and flushes
// (the shape that broke vLLM #56836's deadline).
type slowLink struct {
	*pair
	delay   time.Duration
	pending []timed // consumer -> producer, not yet delivered
	silent  bool    // the producer stopped answering (its loop is stuck)
}

type timed struct {
	at time.Time
	m  wire.Message
}

func (l *slowLink) step(i int) {
	l.t.Helper()
	l.now = l.now.Add(100 * time.Millisecond)
	k := testkeys.Key("grow", i)
	l.p.blocks.add(k)
	l.c.s.RegisterLookup("kv", k)
	l.c.s.FlushLookups(l.now)
	l.c.s.Tick(l.now)
	l.p.s.Tick(l.now)
	l.c.collect(l.t)
	for _, m := range l.c.inbox {
		l.pending = append(l.pending, timed{l.now, m})
	}
	l.c.inbox = nil
	for len(l.pending) > 0 && !l.now.Before(l.pending[0].at.Add(l.delay)) {
		m := l.pending[0].m
		l.pending = l.pending[1:]
		if _, isLookup := m.(*wire.Lookup); isLookup && l.silent {
			continue
		}
		l.p.s.Receive(l.now, m)
	}
	l.p.collect(l.t)
	for _, m := range l.p.inbox {
		l.c.s.Receive(l.now, m)
	}
	l.p.inbox = nil
	l.c.collect(l.t)
}

func newSlowLink(t *testing.T, delay time.Duration) *slowLink {
	pr := readyPair(t, func(c, p *Config) { c.HeartbeatTimeout, p.HeartbeatTimeout = time.Hour, time.Hour })
	return &slowLink{pair: pr, delay: delay}
}

// TestLookupDeadlineMeasuresPeerSilence is the reviewer's probe on vLLM
// #56836: a peer that answers every lookup within 900 ms while a new key
// registers every step is never timed out, for ten times LookupTimeout.
func TestLookupDeadlineMeasuresPeerSilence(t *testing.T) {
	l := newSlowLink(t, 900*time.Millisecond)
	for i := 0; i < 200; i++ { // 20 s
		l.step(i)
		if i >= 10 {
			if v := l.c.s.RegisterLookup("kv", testkeys.Key("grow", i-10)); v != Hit {
				t.Fatalf("step %d: key answered 1 s ago is %v, want HIT", i, v)
			}
		}
	}
	if l.c.ended != health.CauseNone {
		t.Fatalf("session ended: %v", l.c.ended)
	}
}

// TestLookupDeadlineSilentPeer: once the peer stops answering, outstanding
// keys turn MISS exactly LookupTimeout after its last answer; the session
// (and what else it carries) lives on, and a late answer changes nothing.
func TestLookupDeadlineSilentPeer(t *testing.T) {
	l := newSlowLink(t, 500*time.Millisecond)
	for i := 0; i < 20; i++ {
		l.step(i)
	}
	l.silent = true
	lastAnswer := l.now
	firstUnanswered := 15 // sent at step 15, due at step 20: dropped
	i := 20
	for ; l.now.Before(lastAnswer.Add(2*time.Second - 100*time.Millisecond)); i++ {
		l.step(i)
		if v := l.c.s.RegisterLookup("kv", testkeys.Key("grow", firstUnanswered)); v != Retry {
			t.Fatalf("%v after the last answer: %v, want RETRY", l.now.Sub(lastAnswer), v)
		}
	}
	l.step(i)
	if got := l.now.Sub(lastAnswer); got != 2*time.Second {
		t.Fatalf("test stepping: %v", got)
	}
	for j := firstUnanswered; j < i; j++ {
		if v := l.c.s.RegisterLookup("kv", testkeys.Key("grow", j)); v != Miss {
			t.Fatalf("key %d after LookupTimeout of silence: %v, want MISS", j, v)
		}
	}
	if l.c.ended != health.CauseNone {
		t.Fatalf("the lookup deadline ended the session: %v", l.c.ended)
	}
}

// TestLookupDeadlineIgnoresAbandonedLookups: a lookup whose round the
// consumer left (it fetched) and that the producer therefore never answers
// must not arm the deadline against later lookups of other requests.
func TestLookupDeadlineIgnoresAbandonedLookups(t *testing.T) {
	pr := readyPair(t, func(c, p *Config) { c.HeartbeatTimeout, p.HeartbeatTimeout = time.Hour, time.Hour })
	a := testkeys.Keys("a", 2)
	pr.p.blocks.add(a[0])
	pr.p.blocks.pending[a[1]] = true // the producer parks the lookup on a[1]
	vs := pr.lookup("kv", a)
	if vs[0] != Retry || vs[1] != Retry {
		t.Fatalf("parked lookup answered: %v", vs)
	}
	// The producer answers later, key a[1] held now.
	pr.p.blocks.add(a[1])
	pr.advance(20 * time.Millisecond)
	allHit(t, []Verdict{pr.c.s.RegisterLookup("kv", a[0]), pr.c.s.RegisterLookup("kv", a[1])})
	// Second request: parked, then the consumer finishes it (never answered).
	b := testkeys.Key("b", 0)
	pr.p.blocks.pending[b] = true
	pr.lookup("kv2", []wire.Key{b})
	pr.c.s.FinishConsumer(pr.now, "kv2")
	pr.flush()
	// A third request's lookup is answered promptly, then nothing is
	// outstanding: no deadline may fire.
	pr.p.blocks.add(testkeys.Key("c", 0))
	allHit(t, pr.lookup("kv3", []wire.Key{testkeys.Key("c", 0)}))
	pr.p.blocks.add(testkeys.Key("c", 1))
	pr.advance(1500 * time.Millisecond)
	allHit(t, pr.lookup("kv3", []wire.Key{testkeys.Key("c", 1)}))
	pr.advance(1 * time.Second)
	if v := pr.c.s.RegisterLookup("kv3", testkeys.Key("c", 1)); v != Hit {
		t.Fatalf("answered key turned %v", v)
	}
	if pr.c.s.Busy() {
		t.Fatal("consumer busy with a lookup it abandoned")
	}
}
