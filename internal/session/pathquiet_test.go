package session

import (
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
)

// TestPathQuietWidensStall (issue 24: slow is not dead): a data path whose
// kernel says it can be silent for longer than StallTimeout while its peer
// is alive (a slow link's queue: a lost segment comes again only after
// TCP's retransmission timeout, a round trip later) is given that long; a
// path quieter than StallTimeout changes nothing; a silent producer is
// still caught, at the wider window.
func TestPathQuietWidensStall(t *testing.T) {
	const stall = time.Second
	for _, tc := range []struct {
		name  string
		quiet time.Duration
		want  time.Duration // silence at which the watchdog ends the session
	}{
		{"fast path", 300 * time.Millisecond, stall},
		{"slow link", 2500 * time.Millisecond, 2500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr, t0 := runningLoad(t, stall)
			pr.c.s.SetPathQuiet(tc.quiet)
			if _, left, owed := pr.c.s.DataSilence(pr.now); !owed || left != tc.want {
				t.Fatalf("DataSilence: left %v owed %v, want %v owed", left, owed, tc.want)
			}
			pr.advance(t0.Add(tc.want - 10*time.Millisecond).Sub(pr.now))
			if c := pr.c.s.Ended(); c != health.CauseNone {
				t.Fatalf("ended (%v) after %v of silence, before %v", c, pr.now.Sub(t0), tc.want)
			}
			pr.noLoad(1)
			pr.advance(10 * time.Millisecond)
			if c := pr.c.s.Ended(); c != health.CauseProgressStall {
				t.Fatalf("after %v of silence the session's end is %v, want progress-stall", pr.now.Sub(t0), c)
			}
		})
	}
}
