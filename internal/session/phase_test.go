package session

import "testing"

// The transition table allows exactly the moves its doc lists; every other
// pair, staying put included, is illegal.
func TestPhaseMoves(t *testing.T) {
	legal := map[[2]phase]bool{
		{connecting, handshaking}: true, {connecting, ended}: true,
		{handshaking, ready}: true, {handshaking, ended}: true,
		{ready, ended}:  true,
		{ended, closed}: true,
	}
	for from := connecting; from <= closed; from++ {
		for to := connecting; to <= closed; to++ {
			if got := legalMove(from, to); got != legal[[2]phase{from, to}] {
				t.Errorf("legalMove(%v, %v) = %v", from, to, got)
			}
		}
	}
}

// An illegal move panics in a test binary (fsm.Illegal).
func TestPhaseIllegalMovePanics(t *testing.T) {
	s := &Session{phase: ready}
	defer func() {
		if recover() == nil {
			t.Fatal("ready -> handshaking did not panic")
		}
	}()
	s.moveTo(handshaking)
}
