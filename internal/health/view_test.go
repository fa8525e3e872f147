package health

import (
	"testing"
	"time"
)

func viewOf(t *testing.T, p Policy, now time.Time) (map[string]DomainView, Stats) {
	t.Helper()
	v, ok := p.(Viewer)
	if !ok {
		t.Fatalf("%s is not a Viewer", p.Name())
	}
	ds, st := v.View(now)
	out := map[string]DomainView{}
	for _, d := range ds {
		out[d.Domain] = d
	}
	return out, st
}

// TestDomainView: a fault turns the domain suspect, an unanswered probe
// counts as failed, a flapping rank shows ejected with its time left, and
// looking never lifts an ejection.
func TestDomainView(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := mustNew(t, Domain, Options{FlapThreshold: 1, EjectionBase: 10 * time.Second})
	a0, a1, b0 := Peer{ID: "a:0", Domain: "pod-a"}, Peer{ID: "a:1", Domain: "pod-a"}, Peer{ID: "b:0", Domain: "pod-b"}
	for _, x := range []Peer{a0, a1, b0} {
		p.SessionUp(t0, x)
	}
	ds, _ := viewOf(t, p, t0)
	if ds["pod-a"].State != StateOK || ds["pod-b"].State != StateOK || len(ds["pod-a"].Peers) != 2 {
		t.Fatalf("before any fault: %+v", ds)
	}
	p.SessionEnded(t0, a0, End{Cause: CauseConnReset, LoadsFailed: 1, WasUp: true})
	ds, st := viewOf(t, p, t0)
	if ds["pod-a"].State != StateEjected || ds["pod-b"].State != StateOK || st.Ejections != 1 {
		t.Fatalf("after a0 flapped: %+v %+v", ds, st)
	}
	var a0v, a1v PeerView
	for _, pv := range ds["pod-a"].Peers {
		switch pv.ID {
		case a0.ID:
			a0v = pv
		case a1.ID:
			a1v = pv
		}
	}
	if a0v.EjectedFor != 10*time.Second || a0v.Live || !a1v.Probing || !a1v.Live {
		t.Fatalf("a0 %+v a1 %+v", a0v, a1v)
	}
	// The probe of a1 goes unanswered.
	p.Tick(t0.Add(300 * time.Millisecond))
	_, st = viewOf(t, p, t0.Add(300*time.Millisecond))
	if st.ProbesFailed != 1 {
		t.Fatalf("probes failed %d", st.ProbesFailed)
	}
	// Past the ejection, the view says so, and does not lift it itself.
	late := t0.Add(11 * time.Second)
	ds, _ = viewOf(t, p, late)
	if ds["pod-a"].State == StateEjected {
		t.Fatalf("ejection over, still shown: %+v", ds["pod-a"])
	}
	if dp := p.(*domainPolicy); dp.domains["pod-a"].ejected != 1 || dp.peers[a0.ID].ejectedUntil.IsZero() {
		t.Fatal("View lifted an ejection")
	}
}

// TestDomainViewSuspect: a fault without loads makes the domain suspect
// (not ejected) while its siblings are probed, and ok again once they
// answer.
func TestDomainViewSuspect(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := mustNew(t, Domain, Options{})
	a0, a1 := Peer{ID: "a:0", Domain: "pod-a"}, Peer{ID: "a:1", Domain: "pod-a"}
	p.SessionUp(t0, a0)
	p.SessionUp(t0, a1)
	p.SessionEnded(t0, a0, End{Cause: CauseHeartbeatTimeout, WasUp: true})
	if ds, _ := viewOf(t, p, t0); ds["pod-a"].State != StateSuspect {
		t.Fatalf("after a fault: %+v", ds["pod-a"])
	}
	var seq uint64
	for _, d := range p.TakeDecisions() {
		if d.Kind == DecideProbe && d.Peer == a1.ID {
			seq = d.Seq
		}
	}
	p.ProbeAck(t0.Add(time.Millisecond), a1, seq)
	if ds, _ := viewOf(t, p, t0.Add(time.Millisecond)); ds["pod-a"].State != StateOK {
		t.Fatalf("after the sibling answered: %+v", ds["pod-a"])
	}
}

func TestHostGroupView(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := mustNew(t, HostGroup, Options{})
	h1, h2 := Peer{ID: "10.0.0.1:1"}, Peer{ID: "10.0.0.1:2"}
	p.SessionUp(t0, h1)
	p.SessionUp(t0, h2)
	p.SessionEnded(t0, h1, End{Cause: CauseGoodbye, WasUp: true})
	ds, st := viewOf(t, p, t0.Add(time.Second))
	d := ds["10.0.0.1"]
	if d.State != StateEjected || st.Ejections != 1 {
		t.Fatalf("quarantined host: %+v %+v", d, st)
	}
	if ds, _ = viewOf(t, p, t0.Add(11*time.Second)); len(ds) != 0 {
		t.Fatalf("after the quarantine, with no session: %+v", ds)
	}
}
