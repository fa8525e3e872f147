package session

import (
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/nodetest/testkeys"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// TestHandshakeCompatibility pins vLLM's _on_connect checks (§2.3): block
// bytes, fingerprint (empty on either side is compatible), hash seed, and
// the peer id we dialed. A mismatch ends both sides with cause incompatible
// and a Goodbye saying so; a match makes both sides ready.
func TestHandshakeCompatibility(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(c, p *Config)
		ok   bool
	}{
		{"identical", nil, true},
		{"block bytes differ", func(c, p *Config) { p.BlockBytes = 2 * testBlockBytes }, false},
		{"fingerprints differ", func(c, p *Config) { p.Fingerprint = "other" }, false},
		{"producer fingerprint empty", func(c, p *Config) { p.Fingerprint = "" }, true},
		{"consumer fingerprint empty", func(c, p *Config) { c.Fingerprint = "" }, true},
		{"both fingerprints empty", func(c, p *Config) { c.Fingerprint, p.Fingerprint = "", "" }, true},
		{"hash seed differs", func(c, p *Config) { p.HashSeed = "t" }, false},
		{"hash seed empty on one side", func(c, p *Config) { p.HashSeed = "" }, false},
		{"peer id is not the one dialed", func(c, p *Config) { p.LocalID = "10.0.0.1:7778" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr := newPair(t, tc.mod)
			pr.c.s.Start(pr.now)
			pr.p.s.Start(pr.now)
			pr.flush()
			if tc.ok {
				if !pr.c.s.Ready() || !pr.p.s.Ready() {
					t.Fatalf("not ready: consumer %v producer %v", pr.c.ended, pr.p.ended)
				}
				return
			}
			if pr.c.ended != health.CauseIncompatible || pr.p.ended != health.CauseIncompatible {
				t.Fatalf("causes: consumer %v producer %v, want incompatible on both", pr.c.ended, pr.p.ended)
			}
			byes := append(sentOf[*wire.Goodbye](pr.c), sentOf[*wire.Goodbye](pr.p)...)
			if len(byes) == 0 || byes[0].Reason != wire.GoodbyeIncompatible || byes[0].Detail == "" {
				t.Fatalf("no Goodbye(incompatible) with a reason: %+v", byes)
			}
			if pr.c.ended.IsFault() {
				t.Fatal("incompatible must not count as a fault")
			}
		})
	}
}

// TestDuplicateHelloIsProtocolError: a second Hello after the handshake
// would re-register the peer; it ends the session as protocol-error.
func TestDuplicateHelloIsProtocolError(t *testing.T) {
	pr := readyPair(t, nil)
	h := sentOf[*wire.Hello](pr.c)[0]
	pr.p.s.Receive(pr.now, h)
	pr.flush()
	if pr.p.ended != health.CauseProtocolError {
		t.Fatalf("producer cause %v, want protocol-error", pr.p.ended)
	}
	if pr.c.ended != health.CauseGoodbye {
		t.Fatalf("consumer cause %v, want goodbye (it was told)", pr.c.ended)
	}
}

// TestDuplicateHelloAckIsProtocolError: likewise for a second HelloAck.
func TestDuplicateHelloAckIsProtocolError(t *testing.T) {
	pr := readyPair(t, nil)
	pr.c.s.Receive(pr.now, &wire.HelloAck{PeerID: "10.0.0.1:7777", Incarnation: 1})
	pr.c.collect(t)
	if pr.c.ended != health.CauseProtocolError {
		t.Fatalf("cause %v, want protocol-error", pr.c.ended)
	}
}

// TestMessageBeforeHelloIsProtocolError: nothing but the handshake (and
// heartbeats) may precede the peer's Hello.
func TestMessageBeforeHelloIsProtocolError(t *testing.T) {
	pr := newPair(t, nil)
	pr.p.s.Start(pr.now)
	pr.p.s.Receive(pr.now, &wire.Lookup{ReqID: "x", Round: 1, Keys: testkeys.Keys("a", 1)})
	pr.p.collect(t)
	if pr.p.ended != health.CauseProtocolError {
		t.Fatalf("cause %v, want protocol-error", pr.p.ended)
	}
}

// TestSendsQueuedUntilHelloAck: with the peer's Hello accepted but our own
// not yet acknowledged, control sends wait; the HelloAck flushes them in
// order. A load is refused (never queued) until then.
func TestSendsQueuedUntilHelloAck(t *testing.T) {
	pr := newPair(t, nil)
	pr.c.s.Start(pr.now)
	pr.p.s.Start(pr.now)
	pr.c.collect(t)
	pr.p.collect(t)
	// Deliver the producer's Hello to the consumer, but hold the consumer's
	// Hello (so no HelloAck comes back yet).
	for _, m := range pr.p.inbox {
		pr.c.s.Receive(pr.now, m)
	}
	pr.p.inbox = nil
	held := pr.c.inbox
	pr.c.inbox = nil
	pr.c.collect(t) // our HelloAck to the producer
	held = append(held, pr.c.inbox...)
	pr.c.inbox = nil
	if pr.c.s.Ready() {
		t.Fatal("ready without the peer's HelloAck")
	}
	if err := pr.c.s.RequestBlocks(pr.now, 1, "r", testkeys.Keys("a", 1), slots(0, 1), true); err == nil {
		t.Fatal("a load was accepted behind an unfinished handshake")
	}
	pr.c.s.RegisterLookup("r", testkeys.Key("a", 0))
	pr.c.s.FlushLookups(pr.now)
	pr.c.collect(t)
	if n := len(sentOf[*wire.Lookup](pr.c)); n != 0 {
		t.Fatalf("%d lookups sent before the handshake completed", n)
	}
	// Release the held Hello: the producer accepts and acks; the consumer
	// becomes ready and sends the lookup.
	for _, m := range held {
		pr.p.s.Receive(pr.now, m)
	}
	pr.flush()
	if !pr.c.s.Ready() {
		t.Fatal("not ready after the HelloAck")
	}
	ls := sentOf[*wire.Lookup](pr.c)
	if len(ls) != 1 || ls[0].ReqID != "r" {
		t.Fatalf("lookups after ready: %+v", ls)
	}
	last := pr.c.sent[len(pr.c.sent)-1]
	if _, ok := last.(*wire.Lookup); !ok {
		t.Fatalf("last message %T, want the flushed Lookup", last)
	}
}

// TestHandshakeDeadline: a session that is not ready HandshakeTimeout after
// it was created ends with cause handshake-failed (the dial counts).
func TestHandshakeDeadline(t *testing.T) {
	for _, tc := range []struct {
		name    string
		started bool
	}{{"dial never completes", false}, {"peer never answers", true}} {
		t.Run(tc.name, func(t *testing.T) {
			pr := newPair(t, nil)
			if tc.started {
				pr.c.s.Start(pr.now)
			}
			pr.c.s.Tick(pr.now.Add(5*time.Second - time.Millisecond))
			pr.c.collect(t)
			if pr.c.ended != health.CauseNone {
				t.Fatalf("ended %v before the deadline", pr.c.ended)
			}
			pr.c.s.Tick(pr.now.Add(5 * time.Second))
			pr.c.collect(t)
			if pr.c.ended != health.CauseHandshakeFailed {
				t.Fatalf("cause %v, want handshake-failed", pr.c.ended)
			}
		})
	}
}

// TestConnFailedCause: a connection lost before the handshake completed is
// handshake-failed (not a fault); after it, conn-reset (a fault).
func TestConnFailedCause(t *testing.T) {
	pr := newPair(t, nil)
	pr.c.s.ConnFailed(pr.now)
	pr.c.collect(t)
	if pr.c.ended != health.CauseHandshakeFailed {
		t.Fatalf("before ready: %v, want handshake-failed", pr.c.ended)
	}
	pr = readyPair(t, nil)
	pr.c.s.ConnFailed(pr.now)
	pr.c.collect(t)
	if pr.c.ended != health.CauseConnReset {
		t.Fatalf("after ready: %v, want conn-reset", pr.c.ended)
	}
}

// TestGoodbyeCauses: a Goodbye ends the session as goodbye (never a fault),
// except Goodbye(incompatible), which is incompatible.
func TestGoodbyeCauses(t *testing.T) {
	for _, tc := range []struct {
		reason wire.GoodbyeReason
		want   health.Cause
	}{
		{wire.GoodbyeIdle, health.CauseGoodbye},
		{wire.GoodbyeShutdown, health.CauseGoodbye},
		{wire.GoodbyeTooManyPeers, health.CauseGoodbye},
		{wire.GoodbyeIncompatible, health.CauseIncompatible},
	} {
		pr := readyPair(t, nil)
		pr.c.s.Receive(pr.now, &wire.Goodbye{Reason: tc.reason})
		pr.c.collect(t)
		if pr.c.ended != tc.want {
			t.Fatalf("Goodbye(%d): cause %v, want %v", tc.reason, pr.c.ended, tc.want)
		}
	}
}

// TestHeartbeat: an idle ready session pings every HeartbeatInterval and
// ends as heartbeat-timeout after HeartbeatTimeout of silence; pings and
// pongs are not activity for idle eviction.
func TestHeartbeat(t *testing.T) {
	pr := readyPair(t, nil)
	idle0 := pr.c.s.IdleFor(pr.now)
	pr.advance(5 * time.Second) // both answer each other's pings
	if pr.c.ended != health.CauseNone || pr.p.ended != health.CauseNone {
		t.Fatalf("ended while pinging: %v / %v", pr.c.ended, pr.p.ended)
	}
	if n := len(sentOf[*wire.Ping](pr.c)); n < 5 {
		t.Fatalf("%d pings in 5 s, want at least 5", n)
	}
	if got := pr.c.s.IdleFor(pr.now); got != idle0+5*time.Second {
		t.Fatalf("idle for %v, want %v: heartbeats counted as activity", got, idle0+5*time.Second)
	}
	// The producer goes silent.
	pr.c.s.Tick(pr.now.Add(2 * time.Second))
	pr.c.collect(t)
	if pr.c.ended != health.CauseHeartbeatTimeout {
		t.Fatalf("cause %v, want heartbeat-timeout", pr.c.ended)
	}
}
