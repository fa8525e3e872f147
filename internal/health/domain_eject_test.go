package health

import (
	"reflect"
	"strconv"
	"testing"
	"time"
)

// Ejection of flapping ranks: doubling, the cap, half-open probes, the
// share of domains that may be ejected at once.

func TestDomainFlapping(t *testing.T) {
	f := newDfix(t, Options{FlapThreshold: 3})
	p := Peer{ID: "h:1"}
	now := at(0)
	step := func() time.Time { now = now.Add(time.Second); return now }
	ejected := func() bool {
		d, g := f.mayDial(now, p), f.gate(now, p)
		if d == (g == GateMiss) {
			t.Fatalf("MayDial %v but Gate %v", d, g)
		}
		return !d
	}
	// Faults with no load failed never count.
	for i := 0; i < 10; i++ {
		f.up(step(), p)
		f.fault(now, p)
		if ejected() {
			t.Fatalf("ejected after %d faults without failed loads", i+1)
		}
	}
	// Two flaps, a successful load, two flaps: the count restarted.
	for _, ok := range []bool{false, false, true, false, false} {
		f.up(step(), p)
		if ok {
			f.d.LoadDone(now, p, true)
			f.ok()
			f.end(now, p, End{Cause: CauseGoodbye})
		} else {
			f.d.LoadDone(now, p, false) // failed loads do not reset the count
			f.flap(now, p)
		}
		if ejected() {
			t.Fatal("ejected although a load succeeded in between")
		}
	}
	f.up(step(), p)
	f.flap(now, p) // the third in a row
	if !ejected() {
		t.Fatal("not ejected after FlapThreshold flaps")
	}
	// A successful load (on an inbound session, say) lifts the ejection.
	f.up(step(), p)
	f.d.LoadDone(now, p, true)
	f.ok()
	if ejected() {
		t.Fatal("still ejected after a successful load")
	}
	// And resets the doubling: the next ejection is the base again.
	for i := 0; i < 3; i++ {
		f.flap(step(), p)
	}
	if ph := f.d.peers[p.ID]; ph.ejectedUntil != now.Add(base) {
		t.Fatalf("ejected until +%v, want +%v", ph.ejectedUntil.Sub(now), base)
	}
}

func TestDomainEjectionDoublesToCap(t *testing.T) {
	const capd = 35 * time.Second
	f := newDfix(t, Options{FlapThreshold: 1, EjectionCap: capd})
	p := Peer{ID: "h:1", Domain: "pod"}
	now := at(0)
	for i, want := range []time.Duration{base, 2 * base, capd, capd, capd} {
		f.flap(now, p)
		if g := f.gate(now.Add(want-time.Nanosecond), p); g != GateMiss {
			t.Fatalf("ejection %d: Gate %v at +%v", i+1, g, want-time.Nanosecond)
		}
		now = now.Add(want)
		if g := f.gate(now, p); g == GateMiss {
			t.Fatalf("ejection %d: still ejected at +%v", i+1, want)
		}
	}
	// Many repeats never overflow the doubling.
	f2 := newDfix(t, Options{FlapThreshold: 1, EjectionBase: time.Duration(1<<40 + 1), EjectionCap: time.Duration(1 << 62)})
	now = at(0)
	for i := 0; i < 70; i++ {
		f2.flap(now, p)
		until := f2.d.peers[p.ID].ejectedUntil
		if d := until.Sub(now); d < f2.d.opt.EjectionBase || d > 1<<62 {
			t.Fatalf("ejection %d lasts %v", i+1, d)
		}
		now = until
	}
}

func TestDomainHalfOpen(t *testing.T) {
	f := newDfix(t, Options{FlapThreshold: 1, SuspectHold: time.Second})
	p := Peer{ID: "h:1", Domain: "pod"}
	f.up(at(0), p)
	f.flap(at(0), p) // ejected for base
	half := at(base / 2)
	if f.mayDial(half.Add(-time.Nanosecond), p) {
		t.Fatal("dialed before half the ejection")
	}
	if !f.mayDial(half, p) {
		t.Fatal("no half-open attempt at half the ejection")
	}
	if f.mayDial(half, p) || f.mayDial(half.Add(time.Second), p) {
		t.Fatal("more than one half-open attempt")
	}
	f.up(half, p)
	// The half-open session carries no load until its probe answers.
	if g := f.gate(half, p); g != GateWait {
		t.Fatalf("half-open Gate %v, want wait", g)
	}
	s := f.wantProbes("half-open", "h:1")
	f.ack(half, p, s["h:1"])
	if g := f.gate(half, p); g != GateOpen {
		t.Fatalf("after a successful half-open probe Gate %v", g)
	}
	if !f.mayDial(half, p) {
		t.Fatal("still ejected after a successful half-open probe")
	}
	// The next ejection is longer (the probe lifted it, it did not forgive it).
	t2 := half.Add(time.Minute)
	f.flap(t2, p)
	if ph := f.d.peers[p.ID]; ph.ejectedUntil != t2.Add(2*base) {
		t.Fatalf("second ejection until +%v, want +%v", ph.ejectedUntil.Sub(t2), 2*base)
	}
	// A failed half-open probe re-ejects for longer still.
	h2 := t2.Add(base) // half of 2*base
	if f.mayDial(h2.Add(-time.Nanosecond), p) || !f.mayDial(h2, p) {
		t.Fatal("half-open attempt not at half the second ejection")
	}
	f.up(h2, p)
	f.gate(h2, p)
	f.wantProbes("second half-open", "h:1")
	if ds := f.tick(h2.Add(probeTO - time.Nanosecond)); ds != nil {
		t.Fatalf("early: %+v", ds)
	}
	tf := h2.Add(probeTO)
	ds := f.tick(tf)
	if !reflect.DeepEqual(ds, []Decision{{Kind: DecideClose, Peer: "h:1", Cause: CauseProgressStall}}) {
		t.Fatalf("failed half-open probe: %+v", ds)
	}
	if ph := f.d.peers[p.ID]; ph.ejectedUntil != tf.Add(4*base) {
		t.Fatalf("re-ejected until +%v, want +%v", ph.ejectedUntil.Sub(tf), 4*base)
	}
	f.end(tf, p, End{Cause: CauseProgressStall}) // the table closes it
	if f.mayDial(tf.Add(2*base-time.Nanosecond), p) || !f.mayDial(tf.Add(2*base), p) {
		t.Fatal("half-open attempt not at half the re-ejection")
	}
}

// Once the doubling reaches the cap, the half-open attempt is still at half
// of the ejection actually served.
func TestDomainHalfOpenAtCap(t *testing.T) {
	const capd = 30 * time.Second
	f := newDfix(t, Options{FlapThreshold: 1, EjectionCap: capd})
	p := Peer{ID: "h:1", Domain: "pod"}
	now := at(0)
	for i, want := range []time.Duration{base, 2 * base, capd, capd, capd} {
		f.flap(now, p)
		if f.mayDial(now.Add(want/2-time.Nanosecond), p) {
			t.Fatalf("ejection %d (%v): half-open attempt before +%v", i+1, want, want/2)
		}
		if !f.mayDial(now.Add(want/2), p) {
			t.Fatalf("ejection %d (%v): no half-open attempt at +%v", i+1, want, want/2)
		}
		now = now.Add(want)
	}
}

func TestDomainMaxEjectionPercent(t *testing.T) {
	for _, tc := range []struct {
		domains, pct, want int
	}{
		{4, 50, 2},
		{1, 50, 1},
		{1, 10, 1}, // at least one may be
		{3, 10, 1},
		{10, 50, 5},
		{4, 100, 4},
	} {
		f := newDfix(t, Options{FlapThreshold: 1, MaxEjectionPercent: tc.pct})
		var ps []Peer
		for i := 0; i < tc.domains; i++ {
			// Two members per domain: ejecting both counts one domain.
			for j := 0; j < 2; j++ {
				p := Peer{ID: "h" + strconv.Itoa(i) + ":" + strconv.Itoa(j), Domain: "d" + strconv.Itoa(i)}
				ps = append(ps, p)
				f.up(at(0), p)
			}
		}
		for _, p := range ps {
			f.flap(at(time.Second), p)
		}
		n := 0
		for i := 0; i < tc.domains; i++ {
			a, b := f.gate(at(time.Second), ps[2*i]) == GateMiss, f.gate(at(time.Second), ps[2*i+1]) == GateMiss
			if a != b {
				t.Errorf("%+v: domain d%d half ejected", tc, i)
			}
			if a {
				n++
			}
		}
		if n != tc.want {
			t.Errorf("%+v: %d domains ejected, want %d", tc, n, tc.want)
		}
	}
}

// An ejection that ran out frees its place under the cap even if nobody
// looked at the peer since, and is not counted twice when the peer flaps again.
func TestDomainExpiredEjectionFreesCap(t *testing.T) {
	f := newDfix(t, Options{FlapThreshold: 1, MaxEjectionPercent: 50})
	a, b := Peer{ID: "a:1", Domain: "A"}, Peer{ID: "b:1", Domain: "B"}
	f.up(at(0), a, b)
	f.flap(at(0), a)
	f.flap(at(time.Second), b)
	if f.gate(at(time.Second), b) == GateMiss {
		t.Fatal("2 domains at 50 %: the second was ejected too")
	}
	// a's ejection ran out at +base; nobody asked about a since.
	t1 := at(2 * base)
	f.flap(t1, b)
	if f.gate(t1, b) != GateMiss {
		t.Fatal("an expired ejection still counts against the cap")
	}
	// a flaps again after its ejection ran out: one member, one count.
	f2 := newDfix(t, Options{FlapThreshold: 2})
	f2.flap(at(0), a)
	f2.flap(at(0), a)
	if f2.gate(at(0), a) != GateMiss {
		t.Fatal("not ejected")
	}
	f2.flap(at(2*base), a) // first flap after the ejection ran out
	if f2.gate(at(2*base), a) == GateMiss {
		t.Fatal("one flap after an ejection ran out ejected again")
	}
	f2.flap(at(2*base), a)
	if ph := f2.d.peers[a.ID]; ph.ejectedUntil != at(2*base).Add(2*base) {
		t.Fatalf("second ejection until %v", ph.ejectedUntil.Sub(at(2*base)))
	}
}

// The table names a peer's domain from the request before the handshake
// and from the peer's hello after, so the policy sees a peer with no
// domain (a dial for a request that named none) or, rarely, a new one.
func TestDomainPeerChangesDomain(t *testing.T) {
	f := newDfix(t, Options{FlapThreshold: 1, MaxEjectionPercent: 50})
	ps := pod("pod", "h:1", "h:2")
	f.up(at(0), ps...)
	f.fault(at(0), ps[0])
	s := f.wantProbes("fault", "h:2")

	// A call naming no domain keeps a known peer where it is.
	if !f.mayDial(at(0), Peer{ID: "h:2"}) || f.d.peers["h:2"].domain != "pod" {
		t.Fatalf("a call without a domain moved h:2 to %q", f.d.peers["h:2"].domain)
	}
	if _, ok := f.d.domains["peer:h:2"]; ok {
		t.Fatal("a call without a domain made a domain up for a known peer")
	}

	// A new domain named: the outstanding probe moves with the peer.
	moved := Peer{ID: "h:2", Domain: "pod-b"}
	if g := f.gate(at(time.Millisecond), moved); g == GateMiss {
		t.Fatalf("Gate %v", g)
	}
	f.ack(at(time.Millisecond), moved, s["h:2"])
	// pod has no outstanding probe left: it can clear.
	n := Peer{ID: "h:3", Domain: "pod"}
	f.up(at(2*time.Millisecond), n)
	s = f.wantProbes("new session", "h:3")
	f.ack(at(2*time.Millisecond), n, s["h:3"])
	f.up(at(2*time.Millisecond), Peer{ID: "h:4", Domain: "pod"})
	f.wantNothing("pod cleared")

	// An ejection follows the peer, and is still counted once.
	f.flap(at(time.Second), Peer{ID: "h:5", Domain: "x"})
	if f.mayDial(at(time.Second), Peer{ID: "h:5"}) {
		t.Fatal("a dial naming no domain escaped the ejection")
	}
	if f.gate(at(time.Second), Peer{ID: "h:5", Domain: "y"}) != GateMiss {
		t.Fatal("the ejection did not follow the peer to its new domain")
	}
	if f.gate(at(time.Second+base), Peer{ID: "h:5", Domain: "y"}) == GateMiss {
		t.Fatal("still ejected after it ran out")
	}

	// First contact without a domain, then the hello names one: the
	// peer's own domain was a placeholder and is no longer known.
	f.mayDial(at(0), Peer{ID: "h:9"})
	f.up(at(0), Peer{ID: "h:9", Domain: "pod"})
	for name := range f.d.domains {
		if len(f.d.domains[name].members) == 0 {
			t.Errorf("empty domain %q still known (it would loosen the ejection cap)", name)
		}
	}
}
