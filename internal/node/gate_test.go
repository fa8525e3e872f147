package node

import (
	"fmt"
	"net"
	"testing"
	"time"
)

// fakeConn is a connection from addr that only records Close.
type fakeConn struct {
	net.Conn
	addr   net.Addr
	closed bool
}

func (c *fakeConn) RemoteAddr() net.Addr { return c.addr }
func (c *fakeConn) Close() error         { c.closed = true; return nil }

func from(ip string) *fakeConn {
	return &fakeConn{addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}}
}

var gateT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func mustEnter(t *testing.T, g *connGate, c *fakeConn) {
	t.Helper()
	if r := g.enter(c, gateT0); r != gateOK {
		t.Fatalf("connection from %v refused (%d)", c.addr, r)
	}
}

// TestGateEvictsOldestOfSource: a source at its cap does not lock out its
// next connection (a victim sharing a host with the attacker): the oldest
// connection of that source goes instead, silent or not, and the loop
// hears of one that had sent its first frame (halves, evicted) until it
// leaves. Only an empty
// scope refuses.
func TestGateEvictsOldestOfSource(t *testing.T) {
	g := newConnGate(128, 4)
	var att []*fakeConn
	for range 4 {
		c := from("127.0.0.1")
		mustEnter(t, g, c)
		att = append(att, c)
	}
	// The attacker's connections are Hello-only: they spoke.
	for _, c := range att[1:] {
		g.spoke(c)
	}
	victim := from("127.0.0.1")
	mustEnter(t, g, victim)
	if !att[0].closed || att[1].closed {
		t.Fatalf("evicted: first %v, second %v; want only the oldest", att[0].closed, att[1].closed)
	}
	if g.len() != 4 || g.takeEvicted() != 1 {
		t.Fatalf("gate holds %d, want 4 with one eviction", g.len())
	}
	if h := g.halves(); len(h) != 0 {
		t.Fatalf("a silent connection's eviction reported as a half handshake: %v", h)
	}
	// The victim's second connection evicts the attacker's next oldest,
	// not the victim's first, silent and newer.
	mustEnter(t, g, from("127.0.0.1"))
	if victim.closed || !att[1].closed {
		t.Fatal("the victim's newer silent connection went before the attacker's older one")
	}
	if h := g.halves(); len(h) != 1 || h[0] != att[1] {
		t.Fatalf("halves evicted %v, want the attacker's Hello-only connection", h)
	}
	if !g.evicted(att[1]) || g.evicted(att[2]) || g.evicted(victim) {
		t.Fatal("evicted disagrees with the evictions")
	}
	g.leave(att[1]) // the loop dropped it
	if g.evicted(att[1]) || len(g.halves()) != 0 {
		t.Fatal("an evicted half still reported after it left")
	}
	// An empty scope refuses.
	g0 := newConnGate(0, 4)
	if r := g0.enter(from("127.0.0.1"), gateT0); r != gateFull {
		t.Fatalf("enter into an empty gate of no places = %d, want gateFull", r)
	}
	// Another source is unaffected.
	if g.takeEvicted() != 1 {
		t.Fatal("the victim's second connection's eviction not counted")
	}
	mustEnter(t, g, from("10.0.0.1"))
	if g.takeEvicted() != 0 {
		t.Fatal("another source's connection evicted somebody")
	}
}

// TestGatePrefixHoldsHalf is attack 6's first half: five local addresses
// with 32 silent connections each filled the gate's 128 places. One /24
// now holds at most half of them; a consumer from elsewhere gets in
// without evicting anybody, and one inside the prefix by evicting the
// oldest silent connection there.
func TestGatePrefixHoldsHalf(t *testing.T) {
	g := newConnGate(128, 32)
	var att []*fakeConn
	for i := range 160 {
		c := from(fmt.Sprintf("127.0.0.%d", 2+i%5))
		mustEnter(t, g, c) // each evicts the prefix's oldest once it holds 64
		att = append(att, c)
	}
	if g.len() != 64 {
		t.Fatalf("gate holds %d from one /24, want 64", g.len())
	}
	g.takeEvicted()
	mustEnter(t, g, from("10.1.2.3"))
	if g.takeEvicted() != 0 {
		t.Fatal("a consumer from another prefix evicted somebody")
	}
	mustEnter(t, g, from("127.0.0.1"))
	if g.takeEvicted() != 1 {
		t.Fatal("a consumer inside the prefix got in without evicting the oldest")
	}
	if sourcePrefix("fd00::1:2") != "fd00::/64" || sourcePrefix("10.9.8.7") != "10.9.8.0/24" {
		t.Fatalf("prefixes: %s %s", sourcePrefix("fd00::1:2"), sourcePrefix("10.9.8.7"))
	}
}

// TestGateEvictsFromTheLargestSource: at a cap shared by several sources,
// the newcomer evicts the oldest connection of the source holding the
// most, not the oldest overall, so a reconnect storm evicts its own: a
// genuine peer's handshake, one connection from a quiet address, stays
// however many times the flood reopens. A source that completed a
// handshake lately is evicted only by its own or another such source.
func TestGateEvictsFromTheLargestSource(t *testing.T) {
	g := newConnGate(128, 32)
	for i := range 60 {
		mustEnter(t, g, from(fmt.Sprintf("127.0.0.%d", 2+i%5)))
	}
	victim := from("127.0.0.1") // the oldest of the prefix but one source's one
	mustEnter(t, g, victim)
	for i := range 1000 { // the storm: every newcomer evicts (within the rate: 20 a second a source)
		if r := g.enter(from(fmt.Sprintf("127.0.0.%d", 2+i%5)), gateT0.Add(time.Duration(i)*10*time.Millisecond)); r != gateOK {
			t.Fatalf("storm connection %d refused (%d)", i, r)
		}
	}
	if victim.closed {
		t.Fatal("a storm from five addresses evicted the one connection of a quiet address")
	}
	// A recent source's connections are safe from strangers even where it
	// holds the most.
	g2 := newConnGate(8, 8)
	known := from("10.0.0.1")
	g2.handshook(known, gateT0)
	var mine []*fakeConn
	for range 4 {
		c := from("10.0.0.1")
		mustEnter(t, g2, c)
		mine = append(mine, c)
	}
	for range 4 {
		mustEnter(t, g2, from("10.0.1.2"))
	}
	for i := range 100 {
		if r := g2.enter(from("10.0.2.3"), gateT0.Add(time.Duration(i)*200*time.Millisecond)); r != gateOK {
			t.Fatalf("stranger's connection %d refused (%d)", i, r)
		}
	}
	for i, c := range mine {
		if c.closed {
			t.Fatalf("a stranger evicted connection %d of a source that completed a handshake", i)
		}
	}
}

// TestGateRateLimitsStrangers: a source that completed no handshake
// lately enters at most maxPerSource times a second after a burst of
// twice that; past it a reconnect is refused at the door (no eviction);
// the bucket refills; a source that completed a handshake is not limited.
func TestGateRateLimitsStrangers(t *testing.T) {
	g := newConnGate(1024, 4) // 4 a second, a burst of 8
	for i := range 8 {
		if r := g.enter(from("10.0.0.9"), gateT0); r != gateOK {
			t.Fatalf("entry %d of the burst refused (%d)", i, r)
		}
	}
	g.takeEvicted()
	if r := g.enter(from("10.0.0.9"), gateT0); r != gateSourceFull || g.takeEvicted() != 0 {
		t.Fatalf("past the burst: enter %d, want refused without an eviction", r)
	}
	if r := g.enter(from("10.0.0.9"), gateT0.Add(250*time.Millisecond)); r != gateOK {
		t.Fatalf("a quarter second on (one token back): enter %d", r)
	}
	known := from("10.0.1.9")
	g.handshook(known, gateT0)
	for i := range 100 {
		if r := g.enter(from("10.0.1.9"), gateT0); r != gateOK {
			t.Fatalf("a lately handshaken source's entry %d refused (%d)", i, r)
		}
	}
}

// TestGateReservesForRecentSources: sources that never completed a
// handshake fill at most three quarters of the gate; the last quarter is
// for sources that completed one lately, which get in without evicting
// anybody. A stranger at the strangers' cap evicts a stranger.
func TestGateReservesForRecentSources(t *testing.T) {
	g := newConnGate(16, 32)
	known := from("10.0.9.1")
	g.handshook(known, gateT0)
	for i := range 12 {
		c := from(fmt.Sprintf("10.1.%d.1", i)) // one per prefix: no prefix cap
		mustEnter(t, g, c)
		g.spoke(c)
	}
	mustEnter(t, g, from("10.0.20.1"))
	if g.len() != 12 || g.takeEvicted() != 1 {
		t.Fatalf("a stranger took a reserved place: gate holds %d", g.len())
	}
	for range 4 {
		c := from("10.0.9.1")
		mustEnter(t, g, c)
		g.spoke(c)
	}
	if g.len() != 16 || g.takeEvicted() != 0 {
		t.Fatalf("gate %d", g.len())
	}
	// Ten minutes on, the source is a stranger again: it gets in only by
	// evicting a stranger, and the four reserved places stay as they are.
	later := from("10.0.9.1")
	if r := g.enter(later, gateT0.Add(recentFor)); r != gateOK || g.takeEvicted() != 1 || g.nRecent != 4 {
		t.Fatalf("a source recent ten minutes ago: enter %d, %d recent entries, want a stranger evicted and 4", r, g.nRecent)
	}
}

// TestGateRecentIsBounded: the sources remembered for the reserve are at
// most recentMax, the least recent forgotten first.
func TestGateRecentIsBounded(t *testing.T) {
	g := newConnGate(16, 4)
	for i := range recentMax + 10 {
		g.handshook(from(fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)), gateT0.Add(time.Duration(i)*time.Millisecond))
	}
	if len(g.recent) != recentMax {
		t.Fatalf("%d sources remembered, want %d", len(g.recent), recentMax)
	}
	if _, ok := g.recent["10.0.0.0"]; ok {
		t.Fatal("the least recent source was kept")
	}
	if _, ok := g.recent[fmt.Sprintf("10.0.%d.%d", (recentMax+9)>>8&255, (recentMax+9)&255)]; !ok {
		t.Fatal("the most recent source was forgotten")
	}
}
