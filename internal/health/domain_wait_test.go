package health

import (
	"testing"
	"time"
)

// The domain policy's waits (issue 8, item 7): a peer whose process is
// gone (its dial refused) is not waited on; every other peer, a dead data
// path included, gets the full wait.

// Silent and Unanswered (issue 24) are the same whatever the peer's past.
var waitsNormal = Waits{Handshake: 250 * time.Millisecond, StaleDial: 250 * time.Millisecond, Budget: 500 * time.Millisecond,
	Silent: 250 * time.Millisecond, Unanswered: 50 * time.Millisecond}

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

// TestDomainDeadPathFullWait: a peer whose data path was last seen dead
// (its probe unanswered, its session ended by a stall) keeps the full
// wait, and a lookup does not renew its outstanding probe. sim-8c's short
// wait with 50 ms renewals was backed out: on real TCP a renewal travels
// on the data connection, in retransmission backoff after a blackhole,
// and goes unanswered until the probe deadline redials the session; the
// lab's pod-partial had 12 false fallbacks after the heal.
func TestDomainDeadPathFullWait(t *testing.T) {
	a := Peer{ID: "10.0.0.1:1", Domain: "pod-a"}
	b := Peer{ID: "10.0.0.1:2", Domain: "pod-a"}
	f := newDfix(t, Options{})
	f.up(t0, a, b)
	f.fault(t0, a)
	f.wantProbes("the reset", b.ID)
	if g := f.gate(t0.Add(60*time.Millisecond), b); g != GateWait {
		t.Fatalf("gate = %v, want wait", g)
	}
	f.wantProbes("60 ms on: the check's one probe stays outstanding, no renewal")
	if ds := f.tick(t0.Add(probeTO)); len(ds) != 1 || ds[0].Kind != DecideClose {
		t.Fatalf("tick at the deadline: %+v, want b closed", ds)
	}
	f.wantWaits("probe unanswered", t0.Add(probeTO), b, waitsNormal)
	f.end(t0.Add(probeTO), b, End{Cause: CauseProgressStall, ByPolicy: true})
	f.wantWaits("closed by the policy", t0.Add(probeTO), b, waitsNormal)
	f.up(t0.Add(time.Second), b)
	f.wantProbes("its new session proves its path", b.ID)
	f.end(t0.Add(2*time.Second), b, End{Cause: CauseHeartbeatTimeout, WasUp: true, LoadsFailed: 1})
	f.wantWaits("a heartbeat timeout", t0.Add(2*time.Second), b, waitsNormal)
}
