package session

// Slow is its own state (issue 24; docs/liveness.md, "Slow, and the
// consumer's choice"). A load whose bytes arrive, but at a rate at which
// they cannot all arrive before its load timeout, is not worth waiting
// for: the consumer fails it at once, deliberately, so that the engine
// prefills now instead of after the timeout. The session stays and its
// other loads go on: a slow rank is alive, and the next request may need
// fewer bytes or find the link faster.
//
// The judgment is made where its evidence arrives (DataProgress), so it
// adds no timer: a load whose bytes stop is not judged here at all, and
// stays with the progress watchdog, the start budget and the load timeout.

import (
	"fmt"
	"time"
)

// ReasonSlow is the Reason of a load failed because, at the rate its bytes
// have been arriving, it cannot finish within its load timeout.
const ReasonSlow = "too slow to finish within its load timeout"

// Deliberate reports whether a load's failure reason is the consumer's own
// choice to prefill rather than wait (a slow load, or one queued past its
// start budget), not a fault of the peer.
func Deliberate(reason string) bool { return reason == ReasonSlow || reason == ReasonStartBudget }

// slowHoldWindows: a session stays reported slow this many SlowWindows
// after its last slow judgment, so that a scrape between two loads (the
// slow one failed, the next not judged yet) still sees it.
const slowHoldWindows = 4

// slowMarginNum/slowMarginDen: a load is reported slow once its projected
// finish, times this margin (5/4), is past its deadline; it is failed only
// once the projection itself is. Slow is the early warning.
const slowMarginNum, slowMarginDen = 5, 4

// rateMark is a load's byte count at an instant.
type rateMark struct {
	at    time.Time
	bytes uint64
}

// judge updates load l's observed rate with its bytes at now and decides
// whether it is slow, and whether it can still finish in time. It reports
// whether it failed l (the session has output to collect). No allocation:
// it runs for every chunk that lands.
//
// The rate is over the load's own bytes since an anchor one to two
// SlowWindows back (two marks, shifted every window): recent enough to see
// a link that slowed, long enough to smooth one late chunk. It starts at
// the load's first bytes, not at its submission: the time before them is
// the round trip and the producer's queue, which the start budget judges.
func (c *client) judge(s *Session, now time.Time, l *load) bool {
	w := s.cfg.SlowWindow
	if w <= 0 || l.reported || l.dataEnded || l.bytes == 0 {
		return false
	}
	if l.from.at.IsZero() {
		l.from = rateMark{now, l.bytes}
		l.mark = l.from
		return false
	}
	if now.Sub(l.mark.at) >= w {
		l.from, l.mark = l.mark, rateMark{now, l.bytes}
	}
	span := now.Sub(l.from.at)
	got := l.bytes - l.from.bytes
	if span < w || got < uint64(s.cfg.BlockBytes) || l.bytes >= l.expected {
		// Too little seen to judge (a load that just started, one chunk
		// late), or nothing left to wait for.
		return false
	}
	left := l.expected - l.bytes
	remaining := l.submitted.Add(c.loadTimeout(s, l)).Sub(now)
	// In float: bytes left times a span in ns overflows an int64.
	projected := float64(left) * float64(span) / float64(got)
	c.setSlow(l, projected*slowMarginNum/slowMarginDen > float64(remaining), now)
	if projected <= float64(remaining) {
		return false
	}
	s.logger().Info(fmt.Sprintf("load too slow peer=%s req=%s job_id=%d: %d bytes left at %.0f B/s need %.2fs, %.2fs left; prefilling instead",
		s.peer, l.req, l.job, left, float64(got)/span.Seconds(), projected/1e9, remaining.Seconds()),
		"req", l.req, "round", l.round, "job_id", l.job, "bytes", l.bytes, "expected", l.expected)
	c.fail(s, now, l, ReasonSlow)
	c.abort(s, now, l)
	return true
}

// setSlow records load l's slow judgment in the session's count.
func (c *client) setSlow(l *load, slow bool, now time.Time) {
	if slow {
		c.slowAt = now
	}
	if l.slow == slow {
		return
	}
	l.slow = slow
	if slow {
		c.nSlow++
	} else {
		c.nSlow--
	}
}

// Slow reports whether the session is slow at now: a load on it was judged
// slow (delivering, but too slowly to finish within its deadline with a
// margin) and still runs, or was within slowHoldWindows SlowWindows.
func (s *Session) Slow(now time.Time) bool {
	if s.phase != ready {
		return false
	}
	c := &s.client
	return c.nSlow > 0 || (!c.slowAt.IsZero() && now.Sub(c.slowAt) < slowHoldWindows*s.cfg.SlowWindow)
}
