package loads

import "testing"

// Each transition table allows exactly the moves its doc lists; every
// other pair, staying put included, is illegal.
func TestStateTables(t *testing.T) {
	conn := map[[2]connState]bool{
		{connLive, connLingering}: true, {connLive, connClosed}: true,
		{connLingering, connClosed}: true, {connClosed, connGone}: true,
	}
	for from := connLive; from <= connGone; from++ {
		for to := connLive; to <= connGone; to++ {
			if got := legalConnMove(from, to); got != conn[[2]connState{from, to}] {
				t.Errorf("legalConnMove(%v, %v) = %v", from, to, got)
			}
		}
	}
	rep := map[[2]reportState]bool{
		{unreported, reportedUp}: true, {unreported, reaped}: true, {reportedUp, reaped}: true,
	}
	for from := unreported; from <= reaped; from++ {
		for to := unreported; to <= reaped; to++ {
			if got := legalReport(from, to); got != rep[[2]reportState{from, to}] {
				t.Errorf("legalReport(%v, %v) = %v", from, to, got)
			}
		}
	}
	job := map[[2]jobState]bool{
		{jobRunning, jobDone}: true, {jobRunning, jobHolding}: true, {jobRunning, jobParked}: true,
		{jobParked, jobRunning}: true, {jobParked, jobDone}: true,
		{jobHolding, jobDone}: true,
	}
	for from := jobRunning; from <= jobDone; from++ {
		for to := jobRunning; to <= jobDone; to++ {
			if got := legalJobMove(from, to); got != job[[2]jobState{from, to}] {
				t.Errorf("legalJobMove(%v, %v) = %v", from, to, got)
			}
		}
	}
}

// An illegal move panics in a test binary: a gone conn never comes back.
func TestIllegalConnMovePanics(t *testing.T) {
	tb := &Table{}
	c := &conn{id: 1, st: connGone}
	defer func() {
		if recover() == nil {
			t.Fatal("gone -> live did not panic")
		}
	}()
	tb.move(c, connLive)
}
