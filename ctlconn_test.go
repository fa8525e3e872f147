package kvp2p

import (
	"testing"
	"time"
)

// TestMsgBucket: a burst passes at once, then messages are paced at
// ctlRate, and the budget refills while the peer is quiet.
func TestMsgBucket(t *testing.T) {
	t0 := time.Unix(0, 0)
	b := msgBucket{tokens: ctlBurst, last: t0}
	for i := range ctlBurst {
		if w := b.take(t0); w != 0 {
			t.Fatalf("message %d of the burst waits %v", i, w)
		}
	}
	if w := b.take(t0); w != time.Second/ctlRate {
		t.Fatalf("first message over the burst waits %v, want %v", w, time.Second/ctlRate)
	}
	if w := b.take(t0); w != 2*time.Second/ctlRate {
		t.Fatalf("second waits %v", w)
	}
	if w := b.take(t0.Add(time.Second)); w != 0 {
		t.Fatalf("after a quiet second: waits %v", w)
	}
}

// The connection pair's transition table allows exactly the moves its doc
// lists; every other pair, staying put included, is illegal.
func TestCtlStateMoves(t *testing.T) {
	legal := map[[2]ctlState]bool{
		{ctlOpen, ctlDataDown}: true, {ctlOpen, ctlClosing}: true,
		{ctlDataDown, ctlReported}: true, {ctlDataDown, ctlClosing}: true,
		{ctlReported, ctlDone}: true, {ctlClosing, ctlDone}: true,
	}
	for from := ctlOpen; from <= ctlDone; from++ {
		for to := ctlOpen; to <= ctlDone; to++ {
			if got := legalCtlMove(from, to); got != legal[[2]ctlState{from, to}] {
				t.Errorf("legalCtlMove(%v, %v) = %v", from, to, got)
			}
		}
	}
}
