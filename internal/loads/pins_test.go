package loads_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/sim"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// lookupRound runs one step of lookups of ks for a new symmetric request
// id of consumer c at the producer 10.0.0.1:7777 and returns how many hit.
// The request stays open (its pins are the producer's until its lookup pin
// timeout) unless finish.
func lookupRound(f *fleet, c *sim.Node, id string, ks []wire.Key, finish bool) int {
	f.t.Helper()
	if err := c.T.NewRequest(f.net.Now, id, sym("kv-"+id, "10.0.0.1", 7777)); err != nil {
		f.t.Fatal(err)
	}
	f.net.Run()
	for _, k := range ks {
		c.T.Lookup(f.net.Now, id, k)
	}
	c.T.EndStep(f.net.Now)
	f.net.Run()
	hits := 0
	for _, k := range ks {
		switch c.T.Lookup(f.net.Now, id, k) {
		case session.Hit:
			hits++
		case session.Retry:
			f.t.Fatalf("%s: lookup still RETRY after the step", id)
		}
	}
	if finish {
		c.T.RequestFinished(f.net.Now, id)
		f.net.Run()
	}
	return hits
}

// TestLookupPinsPerPeerQuota is issue 25's attack 3 in the table: a peer
// whose lookups (100 keys each, never fetched) used to pin the whole
// peers' share (64 of 128 slots) left a healthy consumer's lookups all
// MISS. One session now pins at most share/(k+1), k the sessions holding
// pins counting itself, so there is always room for the next peer.
func TestLookupPinsPerPeerQuota(t *testing.T) {
	f := newFleet(t)
	p := f.node("10.0.0.1:7777", sim.NodeOpts{Slots: 128})
	bad := f.node("10.0.0.6:7777", sim.NodeOpts{})
	good := f.node("10.0.0.2:7777", sim.NodeOpts{})
	hot := nodetest.Keys("hot", 100)
	f.put(p, hot)
	own := nodetest.Keys("own", 8)
	f.put(p, own)

	// Alone, the attacker gets a quarter of the store: share 64, k=1.
	if got := lookupRound(f, bad, "bad0", hot, false); got != 32 {
		t.Fatalf("lone peer's lookup: %d hits, want 32 (share 64 / 2)", got)
	}
	// Again: the same 32 slots are pinned once more, no other.
	if got := lookupRound(f, bad, "bad1", hot, false); got != 32 {
		t.Fatalf("second lookup: %d hits, want the 32 slots it holds", got)
	}
	if n := p.Store.Stats().Pinned; n != 32 {
		t.Fatalf("producer pins %d, want 32", n)
	}

	// The healthy consumer finds room at once, and keeps it while the
	// attacker goes on once a second (its pins expire and are renewed).
	const rounds = 20
	hits, asked := 0, 0
	for i := range rounds {
		lookupRound(f, bad, fmt.Sprintf("bad-%d", i), hot, false)
		hits += lookupRound(f, good, fmt.Sprintf("good-%d", i), own[:4], true)
		asked += 4
		f.net.Advance(time.Second)
	}
	if hits != asked {
		t.Fatalf("healthy consumer: %d of %d lookups hit beside the pinning peer, want all", hits, asked)
	}
	// With both holding pins each one's quota is 64/3 = 21: the attacker
	// holds at most that once its older pins are gone.
	f.net.Advance(10 * time.Second)
	lookupRound(f, good, "good-hold", own, false) // 8 pins held
	lookupRound(f, bad, "bad-last", hot, false)
	if n := p.Store.Stats().Pinned; n != 8+21 {
		t.Fatalf("producer pins %d, want 8 (healthy) + 21 (attacker's quota with two pinning)", n)
	}
}

// TestLookupPinsShareAmongMany: however many sessions pin, together they
// stay within the peers' share (half the store). A newcomer gets its quota
// or what is left of the share; pins taken under a larger quota (before
// more peers pinned) are not renewed above the new one, so once each has
// expired (the lookup pin timeout, 10 s here) every session holds at most
// its quota and there is room for one more.
func TestLookupPinsShareAmongMany(t *testing.T) {
	f := newFleet(t)
	p := f.node("10.0.0.1:7777", sim.NodeOpts{Slots: 128})
	const peers = 6
	// Each peer its own keys, as many as its first quota (108 in all:
	// the store holds them), so that the store's count of pinned slots is
	// the count of pins.
	hot := make([][]wire.Key, peers+1)
	for i := range hot {
		hot[i] = nodetest.Keys(fmt.Sprint("hot", i), 64/(i+2))
		f.put(p, hot[i])
	}
	cs := make([]*sim.Node, peers)
	left := 64
	for i := range cs {
		cs[i] = f.node(fmt.Sprintf("10.0.1.%d:7777", i+1), sim.NodeOpts{})
		got := lookupRound(f, cs[i], fmt.Sprintf("r%d", i), hot[i], false)
		if want := min(64/(i+2), left); got != want {
			t.Fatalf("peer %d: %d hits, want min(its quota %d, left %d)", i, got, 64/(i+2), left)
		}
		left -= got
		if n := p.Store.Stats().Pinned; n != 64-left {
			t.Fatalf("peers pin %d, want %d", n, 64-left)
		}
		f.net.Advance(time.Second) // the pins expire one peer after another
	}
	// Each peer's pins expire in turn (10 s after they were taken) and it
	// looks up again. Nobody is starved: over three rounds of renewals
	// every peer gets pins, and together they stay within the share.
	f.net.Advance(10*time.Second - peers*time.Second)
	var got [peers]int
	for cycle := range 3 {
		for i, c := range cs {
			f.net.Run()
			got[i] += lookupRound(f, c, fmt.Sprintf("again%d-%d", cycle, i), hot[i], false)
			if n := p.Store.Stats().Pinned; n > 64 {
				t.Fatalf("peers pin %d, over the share of 64", n)
			}
			f.net.Advance(10 * time.Second / peers)
		}
	}
	for i, n := range got {
		if n == 0 {
			t.Fatalf("peer %d got no pin in three rounds of renewals (pins: %v)", i, got)
		}
	}
}

// TestLookupPinsCountSlots: lookups of one key by many requests pin one
// slot many times, which costs the store one slot: they count as one
// against the session's quota and the share (a burst of a step's
// requests all naming a hot prefix all hit), and pinning one slot over
// and over fills neither for anybody else.
func TestLookupPinsCountSlots(t *testing.T) {
	f := newFleet(t)
	p := f.node("10.0.0.1:7777", sim.NodeOpts{Slots: 16}) // share 8, a lone quota 4
	c := f.node("10.0.0.2:7777", sim.NodeOpts{})
	good := f.node("10.0.0.3:7777", sim.NodeOpts{})
	hot := nodetest.Keys("hot", 1)
	f.put(p, hot)
	own := nodetest.Keys("own", 2)
	f.put(p, own)
	for i := range 20 {
		if got := lookupRound(f, c, fmt.Sprintf("r%d", i), hot, false); got != 1 {
			t.Fatalf("lookup %d of the hot key: %d hits, want 1", i, got)
		}
	}
	if got := lookupRound(f, good, "g", own, true); got != 2 {
		t.Fatalf("another peer beside 20 pins of one slot: %d of 2 hits", got)
	}
}

// TestLookupPinsShareBySource is issue 34's attack 1 in the table: one
// host opens 8 sessions under 8 ports of its own, each pinning 32 keys
// with a new request every step. Per-session quotas let the 8 fill the
// share (64 of 64) and a healthy consumer on another host got no hit. The
// quota is per source (a host): the 8 together hold one source's share,
// and the consumer's lookups all hit.
func TestLookupPinsShareBySource(t *testing.T) {
	f := newFleet(t)
	p := f.node("10.0.0.1:7777", sim.NodeOpts{Slots: 128})
	const faces = 8
	bad := make([]*sim.Node, faces)
	hot := make([][]wire.Key, faces)
	for i := range bad {
		bad[i] = f.node(fmt.Sprintf("10.0.0.6:%d", 7001+i), sim.NodeOpts{})
		hot[i] = nodetest.Keys(fmt.Sprint("face", i), 32)
		f.put(p, hot[i])
	}
	good := f.node("10.0.0.2:7777", sim.NodeOpts{})
	own := nodetest.Keys("own", 40)
	f.put(p, own)
	for i, b := range bad {
		lookupRound(f, b, fmt.Sprintf("face%d-0", i), hot[i], false)
	}
	if n := p.Store.Stats().Pinned; n != 32 {
		t.Fatalf("8 sessions of one host pin %d slots, want one source's quota (32)", n)
	}
	hits, asked := 0, 0
	for r := range 20 {
		for i, b := range bad {
			lookupRound(f, b, fmt.Sprintf("face%d-%d", i, r+1), hot[i], false)
		}
		hits += lookupRound(f, good, fmt.Sprintf("good-%d", r), own[2*r:2*r+2], true)
		asked += 2
		f.net.Advance(20 * time.Millisecond)
	}
	if hits != asked {
		t.Fatalf("healthy consumer: %d of %d lookups hit beside 8 sessions of one host, want all", hits, asked)
	}
	if n := p.Store.Stats().Pinned; n > 64 {
		t.Fatalf("peers pin %d, over the share of 64", n)
	}
}
