package session

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/nodetest/testkeys"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// Quotas per session: finding 4 of issue 9 (one peer can make unbounded
// work) and finding 5's pins that no fetch follows.

// hits counts the true entries of the producer's LookupResps for req.
func lookupAnswers(sd *side) (answered, hit int) {
	for _, r := range sentOf[*wire.LookupResp](sd) {
		answered++
		for _, h := range r.Hits {
			if h {
				hit++
			}
		}
	}
	return
}

// TestLookupFloodBoundsRounds: a peer sending lookups for thousands of
// requests used to open a round for each (every tick then visits them
// all). Rounds a peer opens are capped at MaxInflight; the rest are
// answered MISS at once, without pinning.
func TestLookupFloodBoundsRounds(t *testing.T) {
	pr := readyPair(t, nil) // MaxInflight 64
	ks := testkeys.Keys("flood", 1)
	pr.p.blocks.add(ks...)
	const n = 2000
	for i := range n {
		pr.p.s.Receive(pr.now, &wire.Lookup{ReqID: fmt.Sprintf("r%d", i), Round: 1, Keys: ks})
	}
	pr.p.collect(t)
	if got := pr.p.s.server.quota.peerRounds; got != 64 {
		t.Fatalf("%d rounds open, want the cap 64", got)
	}
	answered, hit := lookupAnswers(pr.p)
	if answered != n || hit != 64 {
		t.Fatalf("%d lookups answered (%d hits), want %d answered, 64 hits", answered, hit, n)
	}
	if p := pr.p.blocks.pinned(); p != 64 {
		t.Fatalf("%d pins, want 64", p)
	}
	if pr.p.s.Ended() != health.CauseNone {
		t.Fatalf("a refused lookup ended the session: %v", pr.p.s.Ended())
	}
	// The pins no fetch claims go after the symmetric load timeout (10 s),
	// not the store timeout (30 s); then new lookups are served again.
	pr.advance(10*time.Second + 20*time.Millisecond)
	if p := pr.p.blocks.pinned(); p != 0 {
		t.Fatalf("%d lookup pins held after the lookup pin timeout", p)
	}
	if got := pr.p.s.server.quota.peerRounds; got != 0 {
		t.Fatalf("%d rounds still counted", got)
	}
}

// TestLookupKeyRate: lookup keys are served at most LookupKeysPerSecond
// per session; over it the lookup is a MISS, and the budget refills.
func TestLookupKeyRate(t *testing.T) {
	pr := readyPair(t, func(c, p *Config) { p.LookupKeysPerSecond = 100 })
	ks := testkeys.Keys("rate", 60)
	pr.p.blocks.add(ks...)
	pr.p.s.Receive(pr.now, &wire.Lookup{ReqID: "a", Round: 1, Keys: ks})
	pr.p.s.Receive(pr.now, &wire.Lookup{ReqID: "b", Round: 1, Keys: ks})
	pr.p.collect(t)
	if answered, hit := lookupAnswers(pr.p); answered != 2 || hit != 60 {
		t.Fatalf("answered %d, hits %d: want 2 answered, the second all MISS", answered, hit)
	}
	pr.now = pr.now.Add(time.Second)
	pr.p.s.Receive(pr.now, &wire.Lookup{ReqID: "c", Round: 1, Keys: ks})
	pr.p.collect(t)
	if _, hit := lookupAnswers(pr.p); hit != 120 {
		t.Fatalf("after a second the budget did not refill: %d hits", hit)
	}
}

// TestSourceSharesOpenRounds: the sessions of one source share one cap
// on the rounds their lookups open (SourceQuota), each keeping its part:
// a flood on one session leaves a second session of the same source its
// lookups, the flooder gets no more once the source is at the cap, and a
// fetch is never refused for the source's rounds.
func TestSourceSharesOpenRounds(t *testing.T) {
	a, b := readyPair(t, nil), readyPair(t, nil) // MaxInflight 64
	src := &SourceQuota{}
	a.p.blocks.src, b.p.blocks.src = src, src
	ks := testkeys.Keys("src", 1)
	a.p.blocks.add(ks...)
	b.p.blocks.add(ks...)
	for i := range 200 {
		a.p.s.Receive(a.now, &wire.Lookup{ReqID: fmt.Sprintf("a%d", i), Round: 1, Keys: ks})
	}
	a.p.collect(t)
	if src.rounds != 64 || src.sessions != 1 {
		t.Fatalf("source holds %d rounds of %d sessions, want 64 of 1", src.rounds, src.sessions)
	}
	// The second session is under its part (64/2): served though the
	// source is at its cap.
	for i := range 10 {
		b.p.s.Receive(b.now, &wire.Lookup{ReqID: fmt.Sprintf("b%d", i), Round: 1, Keys: ks})
	}
	b.p.collect(t)
	if _, hit := lookupAnswers(b.p); hit != 10 {
		t.Fatalf("second session of the source: %d of 10 lookups hit beside the flood", hit)
	}
	// The flooder is over its part: its new rounds are refused.
	a.p.s.Receive(a.now, &wire.Lookup{ReqID: "a-more", Round: 1, Keys: ks})
	a.p.collect(t)
	if a.p.s.server.quota.peerRounds != 64 || src.rounds != 74 || src.sessions != 2 {
		t.Fatalf("after the flooder's next lookup: it holds %d, the source %d of %d sessions; want 64, 74, 2",
			a.p.s.server.quota.peerRounds, src.rounds, src.sessions)
	}
	// A fetch opens its round whatever the source holds (our Hello
	// promised the session MaxInflight).
	b.p.s.Receive(b.now, &wire.Fetch{ReqID: "pd", Job: 1, Keys: ks, Slots: []uint32{1}})
	b.p.collect(t)
	if b.p.s.Ended() != health.CauseNone || src.rounds != 75 {
		t.Fatalf("a fetch beside the source's cap: session %v, source rounds %d", b.p.s.Ended(), src.rounds)
	}
	// The rounds go back as they end: the lookup pins lapse (10 s).
	a.advance(10*time.Second + 20*time.Millisecond)
	if src.rounds != 11 || src.sessions != 1 {
		t.Fatalf("after the flooder's rounds ended: source %d rounds of %d sessions, want 11 of 1", src.rounds, src.sessions)
	}
}

// TestFetchOverMaxInflight: a fetch beyond the MaxInflight our Hello
// advertised breaks the peer's promise: the session ends with a protocol
// error rather than holding unbounded jobs.
func TestFetchOverMaxInflight(t *testing.T) {
	pr := readyPair(t, func(c, p *Config) { p.MaxInflight = 4 })
	for i := range 5 {
		k := testkeys.Key("mi", i)
		pr.p.s.Receive(pr.now, &wire.Fetch{ReqID: fmt.Sprintf("r%d", i), Job: uint64(i + 1), Keys: []wire.Key{k}, Slots: []uint32{1}})
	}
	pr.p.collect(t)
	if c := pr.p.s.Ended(); c != health.CauseProtocolError {
		t.Fatalf("cause %v, want protocol-error", c)
	}
}

// TestConsumerKeepsUnderPeerMaxInflight: the consumer never sends a fetch
// over the peer's advertised MaxInflight: the load fails at once instead.
func TestConsumerKeepsUnderPeerMaxInflight(t *testing.T) {
	pr := readyPair(t, func(c, p *Config) { p.MaxInflight = 2 })
	pr.load(1, "a", testkeys.Keys("a", 1), true)
	pr.load(2, "b", testkeys.Keys("b", 1), true)
	if err := pr.c.s.RequestBlocks(pr.now, 3, "c", testkeys.Keys("c", 1), slots(300, 1), true); err == nil {
		t.Fatal("a third fetch was sent over the peer's max_inflight 2")
	}
	if pr.p.s.Ended() != health.CauseNone {
		t.Fatalf("session ended: %v", pr.p.s.Ended())
	}
}

// TestUnbackedFetchExpires: a fetch no store job ever backs used to live
// as long as the session. It fails after twice the longer of the store
// and PD load timeouts.
func TestUnbackedFetchExpires(t *testing.T) {
	pr := readyPair(t, func(c, p *Config) { c.LoadTimeoutPD = time.Hour })
	pr.load(1, "r", testkeys.Keys("u", 1), true)
	pr.advance(59 * time.Second)
	if len(pr.p.dataOf(OpCancel, 1)) != 0 {
		t.Fatal("canceled before its time")
	}
	pr.advance(2 * time.Second)
	if len(pr.p.dataOf(OpCancel, 1)) != 1 {
		t.Fatal("a fetch nothing backs was not canceled after 60 s")
	}
	pr.sendEnd(1, false, 0)
	if tds := sentOf[*wire.TransferDone](pr.p); len(tds) != 1 || tds[0].Success {
		t.Fatalf("want one failed TransferDone, got %+v", tds)
	}
}
