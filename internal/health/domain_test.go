package health

import (
	"reflect"
	"sort"
	"strconv"
	"testing"
	"time"
)

const (
	probeTO = 250 * time.Millisecond
	base    = 10 * time.Second
)

// dfix drives a domain policy and checks its bookkeeping after every call.
type dfix struct {
	t *testing.T
	d *domainPolicy
}

func newDfix(t *testing.T, opt Options) *dfix {
	t.Helper()
	p := mustNew(t, Domain, opt)
	return &dfix{t: t, d: p.(*domainPolicy)}
}

func (f *dfix) ok() {
	f.t.Helper()
	if err := f.d.check(); err != nil {
		f.t.Fatalf("check: %v", err)
	}
}

func (f *dfix) up(now time.Time, ps ...Peer) {
	f.t.Helper()
	for _, p := range ps {
		f.d.SessionUp(now, p)
		f.ok()
	}
}

func (f *dfix) end(now time.Time, p Peer, e End) {
	f.t.Helper()
	// As the table does: WasUp for a session whose SessionUp was reported.
	if ph := f.d.peers[p.ID]; ph != nil && ph.ups > 0 {
		e.WasUp = true
	}
	if out := f.d.SessionEnded(now, p, e); out != nil {
		f.t.Fatalf("SessionEnded(%s) closed %v: the domain policy never closes in the reap", p.ID, out)
	}
	f.ok()
}

func (f *dfix) fault(now time.Time, p Peer) { f.t.Helper(); f.end(now, p, End{Cause: CauseConnReset}) }

func (f *dfix) flap(now time.Time, p Peer) {
	f.t.Helper()
	f.end(now, p, End{Cause: CauseConnReset, LoadsFailed: 1})
}

func (f *dfix) gate(now time.Time, p Peer) Gate {
	f.t.Helper()
	g := f.d.Gate(now, p)
	f.ok()
	return g
}

func (f *dfix) mayDial(now time.Time, p Peer) bool {
	f.t.Helper()
	ok := f.d.MayDial(now, p)
	f.ok()
	return ok
}

func (f *dfix) ack(now time.Time, p Peer, seq uint64) {
	f.t.Helper()
	f.d.ProbeAck(now, p, seq)
	f.ok()
}

func (f *dfix) tick(now time.Time) []Decision {
	f.t.Helper()
	f.d.Tick(now)
	f.ok()
	return actions(f.d.TakeDecisions())
}

// probes takes the decisions, requires them all to be probes, and returns
// peer -> seq, failing on a peer probed twice.
func (f *dfix) probes() map[string]uint64 {
	f.t.Helper()
	out := map[string]uint64{}
	for _, d := range actions(f.d.TakeDecisions()) {
		if d.Kind != DecideProbe || d.Seq == 0 {
			f.t.Fatalf("decision %+v, want probes only", d)
		}
		if _, dup := out[d.Peer]; dup {
			f.t.Fatalf("%s probed twice in one batch", d.Peer)
		}
		out[d.Peer] = d.Seq
	}
	return out
}

func keys(m map[string]uint64) []string {
	out := []string{}
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (f *dfix) wantProbes(what string, want ...string) map[string]uint64 {
	f.t.Helper()
	got := f.probes()
	if want == nil {
		want = []string{}
	}
	if !reflect.DeepEqual(keys(got), want) {
		f.t.Fatalf("%s: probed %v, want %v", what, keys(got), want)
	}
	return got
}

func (f *dfix) wantNothing(what string) {
	f.t.Helper()
	if ds := actions(f.d.TakeDecisions()); len(ds) != 0 {
		f.t.Fatalf("%s: decisions %+v, want none", what, ds)
	}
}

func pod(name string, ids ...string) []Peer {
	var out []Peer
	for _, id := range ids {
		out = append(out, Peer{ID: id, Domain: name})
	}
	return out
}

func TestDomainWaits(t *testing.T) {
	p := Peer{ID: "10.0.0.1:7777", Domain: "pod-a"}
	if w := mustNew(t, Domain, Options{}).Waits(t0, p); w != (Waits{Handshake: 250 * time.Millisecond, StaleDial: 250 * time.Millisecond, Budget: 500 * time.Millisecond, Silent: 250 * time.Millisecond, Unanswered: 50 * time.Millisecond}) {
		t.Errorf("default Waits = %+v, want connect_wait 250ms, budget connect_wait + probe_timeout, silent probe_timeout, unanswered 50ms", w)
	}
	o := Options{ConnectWait: 40 * time.Millisecond, ProbeTimeout: time.Second, UnansweredDial: 20 * time.Millisecond}
	if w := mustNew(t, Domain, o).Waits(t0, p); w != (Waits{Handshake: 40 * time.Millisecond, StaleDial: 40 * time.Millisecond, Budget: 1040 * time.Millisecond, Silent: time.Second, Unanswered: 20 * time.Millisecond}) {
		t.Errorf("Waits = %+v, want ConnectWait 40ms, budget 1040ms, silent 1s, unanswered 20ms", w)
	}
}

func TestDomainNonFaultsAreNoEvidence(t *testing.T) {
	ends := []End{
		{Cause: CauseGoodbye, LoadsFailed: 2},
		{Cause: CauseIncompatible, LoadsFailed: 2},
		{Cause: CauseHandshakeFailed, LoadsFailed: 2},
		{Cause: CauseNone, LoadsFailed: 2},
	}
	for _, c := range allCauses {
		if c.IsFault() {
			ends = append(ends, End{Cause: c, Restart: true, LoadsFailed: 2})
		}
	}
	for _, e := range ends {
		f := newDfix(t, Options{FlapThreshold: 1})
		ps := pod("pod", "h:1", "h:2", "h:3")
		for i := 0; i < 5; i++ {
			now := at(time.Duration(i) * time.Second)
			f.up(now, ps...)
			f.end(now, ps[0], e)
			f.wantNothing(e.Cause.String())
			if !f.mayDial(now, ps[0]) {
				t.Fatalf("%+v: dead peer may not be dialed", e)
			}
			f.up(now, ps[0])
			for _, p := range ps {
				if g := f.gate(now, p); g != GateOpen {
					t.Fatalf("%+v: Gate(%s) = %v", e, p.ID, g)
				}
			}
			f.wantNothing(e.Cause.String())
			if f.tick(now.Add(time.Hour)) != nil {
				t.Fatalf("%+v: Tick decided", e)
			}
		}
	}
}

func TestDomainFaultProbesLiveSiblings(t *testing.T) {
	for _, c := range allCauses {
		if !c.IsFault() {
			continue
		}
		f := newDfix(t, Options{})
		a := pod("pod-a", "10.0.0.1:1", "10.0.0.1:2", "10.0.0.1:3", "10.0.0.1:4")
		b := pod("pod-b", "10.0.0.1:5", "10.0.0.2:1")
		solo := Peer{ID: "10.0.0.1:6"} // same host, own domain
		f.up(at(0), a...)
		f.up(at(0), b...)
		f.up(at(0), solo)
		f.end(at(0), a[3], End{Cause: CauseGoodbye}) // known, not live
		f.wantNothing("setup")
		f.end(at(time.Second), a[0], End{Cause: c})
		got := f.wantProbes(c.String(), "10.0.0.1:2", "10.0.0.1:3")
		if got["10.0.0.1:2"] == got["10.0.0.1:3"] {
			t.Errorf("%v: one seq for two probes: %v", c, got)
		}
		// Siblings wait for their probes; other domains do not.
		for _, p := range a[1:3] {
			if g := f.gate(at(time.Second), p); g != GateWait {
				t.Errorf("%v: Gate(%s) = %v, want wait", c, p.ID, g)
			}
		}
		for _, p := range append(b, solo) {
			if g := f.gate(at(time.Second), p); g != GateOpen {
				t.Errorf("%v: Gate(%s) in another domain = %v", c, p.ID, g)
			}
		}
		f.wantNothing("gates with probes outstanding")
		if !f.mayDial(at(time.Second), a[0]) {
			t.Errorf("%v: a single fault (no load failed) keeps the peer from being dialed", c)
		}
	}
}

// The work a fault causes is the size of the domain, not of the fleet.
func TestDomainFaultWorkIsPerDomain(t *testing.T) {
	f := newDfix(t, Options{})
	for i := 0; i < 500; i++ {
		f.d.SessionUp(at(0), Peer{ID: "x:" + strconv.Itoa(i), Domain: "d" + strconv.Itoa(i%100)})
	}
	f.ok()
	f.fault(at(0), Peer{ID: "x:7", Domain: "d7"})
	f.wantProbes("fault", "x:107", "x:207", "x:307", "x:407")
}

func TestDomainProbeAckClearsSuspicion(t *testing.T) {
	f := newDfix(t, Options{})
	ps := pod("pod", "h:1", "h:2", "h:3")
	f.up(at(0), ps...)
	now := at(time.Second)
	f.fault(now, ps[0])
	seq := f.wantProbes("fault", "h:2", "h:3")
	b, c := ps[1], ps[2]

	// A wrong, zero or someone else's seq is ignored.
	for _, s := range []uint64{0, seq["h:2"] + 100, seq["h:3"]} {
		f.ack(now, b, s)
		if g := f.gate(now, b); g != GateWait {
			t.Fatalf("ack with seq %d verified h:2 (Gate %v)", s, g)
		}
	}
	f.ack(now, Peer{ID: "h:9", Domain: "pod"}, seq["h:2"]) // unknown peer
	f.wantNothing("ignored acks")

	f.ack(now, b, seq["h:2"])
	if g := f.gate(now, b); g != GateOpen {
		t.Fatalf("verified h:2: Gate %v", g)
	}
	if g := f.gate(now, c); g != GateWait {
		t.Fatalf("unverified h:3: Gate %v", g)
	}
	f.ack(now, b, seq["h:2"]) // a duplicate ack changes nothing
	if g := f.gate(now, c); g != GateWait {
		t.Fatalf("duplicate ack cleared the domain: Gate(h:3) %v", g)
	}
	f.ack(now.Add(probeTO-1), c, seq["h:3"])
	f.wantNothing("acks")
	// Every live sibling answered: the domain is clear, well before SuspectHold.
	later := now.Add(probeTO)
	d := Peer{ID: "h:4", Domain: "pod"}
	f.up(later, d) // a new member: no probe
	f.wantNothing("sessions into a cleared domain")
	// The dead peer comes back: the domain is clear, but the rank that
	// faulted proves its own data path before its session carries a load.
	f.up(later, ps[0])
	own := f.wantProbes("the faulted rank's re-check", "h:1")
	if g := f.gate(later, ps[0]); g != GateWait {
		t.Fatalf("faulted rank before its re-check: Gate %v", g)
	}
	if g := f.gate(later, d); g != GateOpen {
		t.Fatalf("its re-check made the domain suspect: Gate(h:4) %v", g)
	}
	f.ack(later, ps[0], own["h:1"])
	for _, p := range append(ps, d) {
		if g := f.gate(later, p); g != GateOpen {
			t.Errorf("cleared domain: Gate(%s) = %v", p.ID, g)
		}
	}
	if ds := f.tick(now.Add(time.Hour)); ds != nil {
		t.Errorf("answered probes timed out: %+v", ds)
	}
}

func TestDomainStaleSeqAfterSecondFault(t *testing.T) {
	f := newDfix(t, Options{})
	ps := pod("pod", "h:1", "h:2", "h:3")
	f.up(at(0), ps...)
	f.fault(at(0), ps[0])
	first := f.wantProbes("first fault", "h:2", "h:3")
	f.fault(at(time.Millisecond), ps[2]) // another fault: a new epoch
	second := f.wantProbes("second fault", "h:2")
	if second["h:2"] == first["h:2"] {
		t.Fatalf("second fault reused seq %d", first["h:2"])
	}
	f.ack(at(2*time.Millisecond), ps[1], first["h:2"]) // stale: answers the old epoch
	if g := f.gate(at(2*time.Millisecond), ps[1]); g != GateWait {
		t.Fatalf("stale ack verified: Gate %v", g)
	}
	f.wantNothing("gate with a probe outstanding")
	f.ack(at(3*time.Millisecond), ps[1], second["h:2"])
	if g := f.gate(at(3*time.Millisecond), ps[1]); g != GateOpen {
		t.Fatalf("Gate %v after the current probe answered", g)
	}
	// The stale deadline does not fire either.
	if ds := f.tick(at(time.Hour)); ds != nil {
		t.Fatalf("tick: %+v", ds)
	}
}

func TestDomainProbeTimeoutCloses(t *testing.T) {
	f := newDfix(t, Options{ProbeTimeout: probeTO})
	ps := pod("pod", "h:1", "h:2", "h:3", "h:4")
	other := Peer{ID: "o:1", Domain: "other"}
	f.up(at(0), ps...)
	f.up(at(0), other)
	now := at(time.Second)
	f.fault(now, ps[0])
	seq := f.wantProbes("fault", "h:2", "h:3", "h:4")
	f.ack(now.Add(probeTO/2), ps[1], seq["h:2"])
	f.end(now.Add(probeTO/2), ps[3], End{Cause: CauseGoodbye}) // its probe goes with it
	f.fault(now.Add(probeTO/2), other)                         // another domain: nothing to probe
	f.wantNothing("other domain")

	if ds := f.tick(now.Add(probeTO - time.Nanosecond)); ds != nil {
		t.Fatalf("closed before probe_timeout: %+v", ds)
	}
	ds := f.tick(now.Add(probeTO))
	want := []Decision{{Kind: DecideClose, Peer: "h:3", Cause: CauseProgressStall}}
	if !reflect.DeepEqual(ds, want) {
		t.Fatalf("at probe_timeout: %+v, want %+v", ds, want)
	}
	if ds := f.tick(now.Add(time.Hour)); ds != nil {
		t.Fatalf("closed twice: %+v", ds)
	}
	// A probe failed: the domain stays suspect for SuspectHold (EjectionBase
	// by default). The verified sibling goes on; a new session proves itself.
	t1 := now.Add(probeTO + time.Millisecond)
	if g := f.gate(t1, ps[1]); g != GateOpen {
		t.Errorf("verified sibling after a failed probe: Gate %v", g)
	}
	n := Peer{ID: "h:5", Domain: "pod"}
	f.up(t1, n)
	s := f.wantProbes("new session into a suspect domain", "h:5")
	f.ack(t1, n, s["h:5"])
	if g := f.gate(t1, n); g != GateOpen {
		t.Errorf("answered new session: Gate %v", g)
	}
	n2 := Peer{ID: "h:6", Domain: "pod"}
	over := now.Add(probeTO + base) // SuspectHold after the failed probe
	f.up(over, n2)
	f.wantNothing("session after SuspectHold")
	if g := f.gate(over, n2); g != GateOpen {
		t.Errorf("after SuspectHold: Gate %v", g)
	}
}

func TestDomainGateProbesUnverifiedOnce(t *testing.T) {
	f := newDfix(t, Options{})
	ps := pod("pod", "h:1", "h:2", "h:3")
	f.up(at(0), ps...)
	f.fault(at(0), ps[0])
	seq := f.wantProbes("fault", "h:2", "h:3")
	f.ack(at(0), ps[1], seq["h:2"])
	f.tick(at(probeTO)) // h:3 did not answer: DecideClose; the table has not closed it yet
	// The domain is suspect and h:3 unverified with no probe outstanding:
	// a lookup naming it waits and probes it, once.
	t1 := at(probeTO + time.Millisecond)
	if g := f.gate(t1, ps[2]); g != GateWait {
		t.Fatalf("Gate %v, want wait", g)
	}
	s := f.wantProbes("gate", "h:3")
	for i := 0; i < 3; i++ {
		if g := f.gate(t1, ps[2]); g != GateWait {
			t.Fatalf("Gate %v, want wait", g)
		}
	}
	f.wantNothing("gate with a probe outstanding")
	f.ack(t1, ps[2], s["h:3"])
	if g := f.gate(t1, ps[2]); g != GateOpen {
		t.Fatalf("after ack: Gate %v", g)
	}
	// Its deadline is gone with the ack.
	if ds := f.tick(at(time.Hour)); ds != nil {
		t.Fatalf("tick: %+v", ds)
	}
}

func TestDomainSessionUpIntoSuspect(t *testing.T) {
	f := newDfix(t, Options{})
	a := Peer{ID: "h:1", Domain: "pod"}
	f.up(at(0), a)
	f.fault(at(0), a) // no live sibling: the domain is suspect with nothing to probe
	f.wantNothing("fault without siblings")
	b := Peer{ID: "h:2", Domain: "pod"}
	f.up(at(time.Second), b)
	s := f.wantProbes("session up", "h:2")
	if g := f.gate(at(time.Second), b); g != GateWait {
		t.Fatalf("Gate %v", g)
	}
	f.up(at(time.Second), b) // the same session reported again: still one probe
	f.wantNothing("second SessionUp")
	f.ack(at(time.Second), b, s["h:2"])
	// Its answer clears the domain.
	c := Peer{ID: "h:3", Domain: "pod"}
	f.up(at(time.Second), c)
	f.wantNothing("session into a cleared domain")
	if g := f.gate(at(time.Second), c); g != GateOpen {
		t.Fatalf("Gate %v", g)
	}
}

func TestDomainDeadPeerNotProbed(t *testing.T) {
	// A fault while a sibling's probe is outstanding re-probes it, never the
	// peer that died, and a probe of a session that ended never fires.
	f := newDfix(t, Options{})
	ps := pod("pod", "h:1", "h:2")
	f.up(at(0), ps...)
	f.fault(at(0), ps[0])
	s := f.wantProbes("fault", "h:2")
	f.fault(at(time.Millisecond), ps[1])
	f.wantNothing("second fault, no live sibling")
	f.ack(at(time.Millisecond), ps[1], s["h:2"]) // from the dead session
	if ds := f.tick(at(time.Hour)); ds != nil {
		t.Fatalf("tick: %+v", ds)
	}
}

// actions drops the notes (log lines) from decisions.
func actions(ds []Decision) []Decision {
	var out []Decision
	for _, d := range ds {
		if d.Kind != DecideNote {
			out = append(out, d)
		}
	}
	return out
}
