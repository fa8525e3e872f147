package health

import (
	"testing"
	"time"
)

// TestRefusedHold: a connect attempt that failed (refused, or its hello
// refused) holds on-demand dials to that peer for RefusedHold, so that the
// same request's redial a step later does not keep it waiting; a session
// that was up and faulted holds nothing (its rank may be back at once),
// and after the hold the peer is dialed again.
func TestRefusedHold(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		e    End
		hold bool
	}{
		{"refused dial", End{Cause: CauseHandshakeFailed}, true},
		{"refused hello", End{Cause: CauseIncompatible}, true},
		{"a live session reset", End{Cause: CauseConnReset, WasUp: true}, false},
		{"idle goodbye", End{Cause: CauseGoodbye, WasUp: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newDfix(t, Options{})
			p := Peer{ID: "10.0.0.1:7777", Domain: "pod-a", Outbound: true}
			if tc.e.WasUp {
				f.up(now, p)
			}
			f.end(now, p, tc.e)
			if got := !f.d.MayDial(now.Add(49*time.Millisecond), p); got != tc.hold {
				t.Fatalf("held 49 ms later = %v, want %v", got, tc.hold)
			}
			if !f.d.MayDial(now.Add(50*time.Millisecond), p) {
				t.Fatal("still held after RefusedHold")
			}
			if other := (Peer{ID: "10.0.0.1:7778", Domain: "pod-a", Outbound: true}); !f.d.MayDial(now, other) {
				t.Fatal("a sibling is held too")
			}
		})
	}
}
