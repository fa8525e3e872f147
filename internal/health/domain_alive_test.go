package health

import (
	"reflect"
	"testing"
	"time"
)

// seen reports data from p as the table does (Witness) and checks the
// bookkeeping.
func (f *dfix) seen(now time.Time, p Peer) bool {
	f.t.Helper()
	var w Witness = f.d // the table finds it by this interface
	ok := w.DataSeen(now, p)
	f.ok()
	return ok
}

// TestDomainSlowIsNotDead scripts issue 24's case: a sibling of a crashed
// rank is slow, its probe's answer queued behind its own backlog, but its
// data keeps arriving. It is not closed at the deadline: its check is
// renewed while it delivers, its requests are not held meanwhile, and an
// answer to any probe of the check (the first one, late) ends it. A
// sibling that stays silent is closed at its deadline, as before.
func TestDomainSlowIsNotDead(t *testing.T) {
	f := newDfix(t, Options{ProbeTimeout: probeTO})
	ps := pod("pod", "h:1", "h:2", "h:3")
	slow, dead := ps[1], ps[2]
	f.up(at(0), ps...)
	now := at(time.Second)
	f.fault(now, ps[0])
	seq := f.wantProbes("fault", "h:2", "h:3")
	if g := f.gate(now, slow); g != GateWait {
		t.Fatalf("slow sibling before any data: gate %v, want wait (silent so far)", g)
	}
	// Data from the slow sibling: alive. Its lookups are not held.
	if !f.seen(now.Add(40*time.Millisecond), slow) {
		t.Fatal("DataSeen during a check reported no check running")
	}
	if g := f.gate(now.Add(40*time.Millisecond), slow); g != GateOpen {
		t.Fatalf("slow sibling that delivered: gate %v, want open", g)
	}
	if g := f.gate(now.Add(40*time.Millisecond), dead); g != GateWait {
		t.Fatalf("silent sibling: gate %v, want wait", g)
	}
	// The deadline: the silent one is closed, the slow one's check renewed.
	ds := f.tick(now.Add(probeTO))
	want := []Decision{{Kind: DecideProbe, Peer: "h:2", Seq: seq["h:3"] + 1}, {Kind: DecideClose, Peer: "h:3", Cause: CauseProgressStall}}
	if !reflect.DeepEqual(ds, want) {
		t.Fatalf("at the deadline: %+v, want %+v", ds, want)
	}
	if g := f.gate(now.Add(probeTO), slow); g != GateOpen {
		t.Fatalf("renewed check: gate %v, want open (it delivered since the check began)", g)
	}
	_, st := f.d.View(now.Add(probeTO))
	if st.ProbesRenewed != 1 || st.ProbesFailed != 1 {
		t.Fatalf("stats %+v, want 1 renewed, 1 failed", st)
	}
	// The first probe's answer arrives, late: it ends the check.
	f.ack(now.Add(probeTO+100*time.Millisecond), slow, seq["h:2"])
	if f.d.peers["h:2"].probeSeq != 0 || f.d.peers["h:2"].verified != f.d.domains["pod"].epoch {
		t.Fatal("a late answer to the check's first probe did not end it")
	}
	if f.seen(now.Add(probeTO+110*time.Millisecond), slow) {
		t.Fatal("DataSeen with no check running asked to hear more")
	}
	f.wantNothing("after the answer")
}

// TestDomainSlowThenSilent: a rank that delivered and then fell silent is
// closed SilenceWindow after its last delivery (the stall timeout: it is
// judged as a load's watchdog judges a data path), not kept for good, and
// not closed earlier by the shorter probe timeout.
func TestDomainSlowThenSilent(t *testing.T) {
	const window = time.Second
	f := newDfix(t, Options{ProbeTimeout: probeTO, SilenceWindow: window})
	ps := pod("pod", "h:1", "h:2")
	f.up(at(0), ps...)
	now := at(time.Second)
	f.fault(now, ps[0])
	f.wantProbes("fault", "h:2")
	last := now.Add(probeTO - time.Millisecond)
	f.seen(last, ps[1])
	ds := f.tick(now.Add(probeTO))
	if len(ds) != 1 || ds[0].Kind != DecideProbe {
		t.Fatalf("at the first deadline: %+v, want a renewal", ds)
	}
	if ds := f.tick(last.Add(window - time.Nanosecond)); ds != nil {
		t.Fatalf("before a silence window after its last delivery: %+v", ds)
	}
	ds = f.tick(last.Add(window))
	want := []Decision{{Kind: DecideClose, Peer: "h:2", Cause: CauseProgressStall}}
	if !reflect.DeepEqual(ds, want) {
		t.Fatalf("silent for a whole window: %+v, want %+v", ds, want)
	}
	f.end(last.Add(window), ps[1], End{Cause: CauseProgressStall, ByPolicy: true})
}

// TestDomainDataSeenOutsideACheck: data from a peer no check runs on
// changes nothing, and the answer tells the caller to stop reporting.
func TestDomainDataSeenOutsideACheck(t *testing.T) {
	f := newDfix(t, Options{ProbeTimeout: probeTO})
	ps := pod("pod", "h:1", "h:2")
	f.up(at(0), ps...)
	if f.seen(at(time.Millisecond), ps[1]) || f.seen(at(time.Millisecond), Peer{ID: "unknown:1"}) {
		t.Fatal("DataSeen outside a check asked to hear more")
	}
	f.wantNothing("data outside a check")
	if g := f.gate(at(2*time.Millisecond), ps[1]); g != GateOpen {
		t.Fatalf("gate %v", g)
	}
}

// TestDomainHalfOpenStillWaits: an ejected rank's half-open probe holds its
// lookups even if data arrives (a flapping rank delivers until it fails).
func TestDomainHalfOpenStillWaits(t *testing.T) {
	f := newDfix(t, Options{ProbeTimeout: probeTO, FlapThreshold: 1, EjectionBase: time.Second})
	ps := pod("pod", "h:1")
	f.up(at(0), ps...)
	f.flap(at(time.Second), ps[0])
	f.wantNothing("flap") // alone in its domain: no siblings to probe
	half := at(time.Second + 500*time.Millisecond)
	if !f.mayDial(half, ps[0]) {
		t.Fatal("no half-open dial at half the ejection")
	}
	f.up(half, ps[0])
	f.probes()
	f.seen(half.Add(time.Millisecond), ps[0])
	if g := f.gate(half.Add(time.Millisecond), ps[0]); g != GateWait {
		t.Fatalf("half-open with data: gate %v, want wait", g)
	}
}
