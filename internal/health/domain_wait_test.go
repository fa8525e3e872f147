package health

import (
	"testing"
	"time"
)

// The domain policy's waits for two kinds of peers (issue 8, item 7): one
// whose process is gone (its dial refused), and one whose data path was
// last seen dead.

var (
	waitsNormal = Waits{Handshake: 250 * time.Millisecond, StaleDial: 250 * time.Millisecond, Budget: 500 * time.Millisecond}
	waitsDead   = Waits{Handshake: 250 * time.Millisecond, StaleDial: 10 * time.Millisecond, Budget: 50 * time.Millisecond}
)

func (f *dfix) wantWaits(what string, now time.Time, p Peer, want Waits) {
	f.t.Helper()
	if w := f.d.Waits(now, p); w != want {
		f.t.Fatalf("%s: Waits = %+v, want %+v", what, w, want)
	}
}

// TestDomainRefusedNoWait: only a connect attempt refused by nobody
// listening makes a lookup answer MISS at once on the next pending dial;
// a hello refused by a live process, or a handshake that timed out, keeps
// the wait (the process may be alive, and per-peer's MISS there is a
// false fallback). A session up to the peer ends it.
func TestDomainRefusedNoWait(t *testing.T) {
	p := Peer{ID: "10.0.0.1:7777", Domain: "pod-a", Outbound: true}
	noHandshake := waitsNormal
	noHandshake.Handshake = 0
	for _, tc := range []struct {
		name string
		e    End
		want Waits
	}{
		{"dial refused", End{Cause: CauseHandshakeFailed, Refused: true}, noHandshake},
		{"handshake timed out", End{Cause: CauseHandshakeFailed}, waitsNormal},
		{"hello refused", End{Cause: CauseIncompatible}, waitsNormal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newDfix(t, Options{})
			f.up(t0, p)
			f.fault(t0, p) // the rank's session resets
			f.wantWaits("after the reset", t0, p, waitsNormal)
			f.end(t0.Add(time.Millisecond), p, tc.e)
			f.wantWaits("after the failed attempt", t0.Add(time.Second), p, tc.want)
			// A later attempt that failed otherwise: the process is there.
			f.end(t0.Add(2*time.Second), p, End{Cause: CauseIncompatible})
			f.wantWaits("after a hello refused", t0.Add(2*time.Second), p, waitsNormal)
			f.end(t0.Add(3*time.Second), p, tc.e)
			f.up(t0.Add(4*time.Second), p)
			f.wantWaits("once a session is up", t0.Add(4*time.Second), p, waitsNormal)
		})
	}
}

// TestDomainDeadPathShortWait: a probe unanswered, or a session ended by
// a stall or a heartbeat timeout, marks the peer's data path dead: a
// request waits on it at most reproofWait, a dial to it is stale after
// reproofWait/5. An answered probe or a load that succeeds clears it; a
// reset does not set it (the process is gone or restarting, not silent).
func TestDomainDeadPathShortWait(t *testing.T) {
	a := Peer{ID: "10.0.0.1:1", Domain: "pod-a"}
	b := Peer{ID: "10.0.0.1:2", Domain: "pod-a"}
	f := newDfix(t, Options{})
	f.up(t0, a, b)
	f.fault(t0, a)
	seq := f.wantProbes("the reset", b.ID)[b.ID]
	f.wantWaits("probe outstanding", t0, b, waitsNormal)
	if ds := f.tick(t0.Add(probeTO)); len(ds) != 1 || ds[0].Kind != DecideClose {
		t.Fatalf("tick at the deadline: %+v, want b closed", ds)
	}
	f.wantWaits("probe unanswered", t0.Add(probeTO), b, waitsDead)
	f.end(t0.Add(probeTO), b, End{Cause: CauseProgressStall, ByPolicy: true})
	f.up(t0.Add(time.Second), b)
	seq2 := f.wantProbes("its new session proves its path", b.ID)[b.ID]
	f.ack(t0.Add(time.Second), b, seq) // the old check's answer, late: proves nothing
	f.wantWaits("a stale answer", t0.Add(time.Second), b, waitsDead)
	f.ack(t0.Add(time.Second), b, seq2)
	f.wantWaits("probe answered", t0.Add(time.Second), b, waitsNormal)

	for _, c := range []Cause{CauseProgressStall, CauseHeartbeatTimeout} {
		f.end(t0.Add(2*time.Second), b, End{Cause: c, LoadsFailed: 1})
		f.wantWaits(c.String(), t0.Add(2*time.Second), b, waitsDead)
		f.up(t0.Add(3*time.Second), b)
		f.d.TakeDecisions()
		f.d.LoadDone(t0.Add(3*time.Second), b, true)
		f.wantWaits("a load succeeded", t0.Add(3*time.Second), b, waitsNormal)
	}
	f.end(t0.Add(4*time.Second), b, End{Cause: CauseConnReset, LoadsFailed: 1})
	f.wantWaits("a reset", t0.Add(4*time.Second), b, waitsNormal)
}

// TestDomainProbeRenewal: a lookup that finds its peer's probe
// reproofWait old sends a fresh one (the path may have healed since the
// first went out); an answer to any of them proves the path; renewals are
// at most one per reproofWait and stop at the check's deadline, which they
// do not move: a path that stays dead is closed once, on time.
func TestDomainProbeRenewal(t *testing.T) {
	a := Peer{ID: "10.0.0.1:1", Domain: "pod-a"}
	b := Peer{ID: "10.0.0.1:2", Domain: "pod-a"}
	f := newDfix(t, Options{})
	f.up(t0, a, b)
	f.fault(t0, a)
	first := f.wantProbes("the reset", b.ID)[b.ID]
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	if g := f.gate(at(49), b); g != GateWait {
		t.Fatalf("gate = %v, want wait", g)
	}
	f.wantProbes("49 ms: the first probe is fresh")
	f.gate(at(50), b)
	if second := f.wantProbes("50 ms: renewed", b.ID)[b.ID]; second <= first {
		t.Fatalf("renewal seq %d not above %d", second, first)
	}
	f.gate(at(60), b)
	f.wantProbes("60 ms: the renewal is fresh")
	for _, ms := range []int{100, 150, 200} {
		f.gate(at(ms), b)
		f.wantProbes("renewed again", b.ID)
	}
	f.gate(at(int(probeTO/time.Millisecond)-1), b)
	f.wantProbes("49 ms after the last")
	if n := len(f.d.probes); n != 5 {
		t.Fatalf("%d probes outstanding, want 5 (1 + 4 renewals)", n)
	}
	ds := f.tick(at(int(probeTO / time.Millisecond)))
	if len(ds) != 1 || ds[0].Kind != DecideClose || ds[0].Peer != b.ID {
		t.Fatalf("tick at the first probe's deadline: %+v, want one close of b", ds)
	}
	if len(f.d.probes) != 0 {
		t.Fatalf("probes %v still outstanding after the close", f.d.probes)
	}

	// Answered: an ack of the first probe, sent before a heal, or of a
	// renewal, ends the whole check.
	for _, which := range []string{"first", "renewal"} {
		g := newDfix(t, Options{})
		g.up(t0, a, b)
		g.fault(t0, a)
		s1 := g.wantProbes("the reset", b.ID)[b.ID]
		g.gate(at(60), b)
		s2 := g.wantProbes("renewed", b.ID)[b.ID]
		s := s1
		if which == "renewal" {
			s = s2
		}
		g.ack(at(70), b, s)
		if len(g.d.probes) != 0 || g.gate(at(70), b) != GateOpen {
			t.Fatalf("%s answered: probes %v outstanding, want the check over", which, g.d.probes)
		}
		if ds := g.tick(at(300)); len(ds) != 0 {
			t.Fatalf("%s answered: tick decided %+v", which, ds)
		}
	}
}
