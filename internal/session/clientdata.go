package session

// The consumer's data-path events: what the node's data connection reports
// for a load (bytes landed, queued behind other jobs, a corrupt chunk, its
// end) and the clock's starvation, which moves the deadlines those events
// feed.

import (
	"fmt"
	"time"
)

// DataProgress reports bytes landed or a Progress frame for a consumer job.
// It reports whether it decided something (the load was judged too slow
// to finish in time and failed: slow.go); otherwise it only moved the
// session's timers later.
func (s *Session) DataProgress(now time.Time, job, bytes uint64) bool {
	s.lastRecv = now
	s.client.dataAt = later(s.client.dataAt, now)
	l := s.client.loads[job]
	if l == nil {
		return false
	}
	l.lastData = later(l.lastData, now)
	if bytes > l.bytes {
		l.bytes = bytes
	}
	return s.phase == ready && s.client.judge(s, now, l)
}

// Starved reports that the process could not have observed this session's
// data path for d (the node's loop was starved of CPU beyond what its clock
// already excluded): every running progress-stall deadline, and the
// heartbeat deadline, move d later.
// Progress that arrived meanwhile sat in socket buffers and in the event
// queue, so the time is not the producer's silence. Deadlines never move
// earlier: progress reported after this keeps the later one (DataProgress).
func (s *Session) Starved(d time.Duration) {
	if d <= 0 {
		return
	}
	for _, l := range s.client.loads {
		if !l.reported && !l.dataEnded {
			l.lastData = l.lastData.Add(d)
			// Nor is it a slower rate: the bytes that sat in the buffers
			// are counted when read, over a span without the starvation.
			if !l.from.at.IsZero() {
				l.from.at, l.mark.at = l.from.at.Add(d), l.mark.at.Add(d)
			}
		}
	}
	if !s.client.dataAt.IsZero() {
		s.client.dataAt = s.client.dataAt.Add(d)
	}
	// The peer's heartbeats sat in the socket buffer too (issue 24:
	// starvation blames nobody); the heartbeat deadline only ever moves
	// later, as the others.
	if s.phase == ready {
		s.lastRecv = s.lastRecv.Add(d)
	}
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// DataQueued reports a Progress frame saying the producer has job's blocks
// but has not started sending them (queued behind other jobs): the load's
// start budget runs from the first one.
func (s *Session) DataQueued(now time.Time, job uint64) {
	s.lastRecv = now
	s.client.dataAt = later(s.client.dataAt, now)
	if l := s.client.loads[job]; l != nil {
		l.lastData = later(l.lastData, now)
		if l.queuedAt.IsZero() && l.bytes == 0 {
			l.queuedAt = now
		}
	}
}

// DataCorrupt reports a chunk of job that failed its CRC: the load fails
// now; its later chunks are discarded by the reader.
func (s *Session) DataCorrupt(now time.Time, job uint64) {
	l := s.client.loads[job]
	if l == nil {
		return
	}
	s.logger().Warn("corrupt chunk, failing load", "req", l.req, "round", l.round, "job_id", job)
	s.client.fail(s, now, l, "corrupt chunk")
	s.client.abort(s, now, l)
}

// DataEnd reports the terminal data frame of a consumer job: after it the
// reader never writes into the job's slots.
func (s *Session) DataEnd(now time.Time, job uint64, ok bool, bytes uint64) {
	s.lastRecv = now
	s.client.dataAt = later(s.client.dataAt, now)
	c := &s.client
	l := c.loads[job]
	if l == nil {
		return
	}
	l.dataEnded = true
	l.lastData = now
	l.bytes = bytes
	if ok && bytes == l.expected && !l.reported {
		l.dataOK = true
		c.maybeSucceed(s, l)
		return
	}
	if !l.reported {
		why := "data path failed"
		if ok {
			why = fmt.Sprintf("short transfer: %d of %d bytes", bytes, l.expected)
		}
		c.fail(s, now, l, why)
		if s.phase < ended {
			c.abort(s, now, l)
		}
	}
	c.maybeRelease(s, l)
}

// SetPathQuiet tells the session the longest silence its data path can
// show while the peer is alive, as this node's kernel measures the path:
// TCP's retransmission timeout plus a round trip (the I/O layer reads
// both). The progress watchdog waits at least that long (stallWindow). On
// a path whose queue holds a second of data (a slow link), a lost segment
// is retransmitted after more than a second and arrives a round trip
// later; a second of silence there proves nothing. On a fast path it is
// well under StallTimeout and changes nothing.
func (s *Session) SetPathQuiet(d time.Duration) { s.pathQuiet = max(d, 0) }

// PathQuiet is what SetPathQuiet last told the session.
func (s *Session) PathQuiet() time.Duration { return s.pathQuiet }

// stallWindow is the silence after which the progress watchdog ends the
// session: StallTimeout, or the path's own quiet if longer.
func (s *Session) stallWindow() time.Duration { return max(s.cfg.StallTimeout, s.pathQuiet) }

// DataSilence is how long this session's data path has owed bytes and
// shown no life: the longest any running load has waited on it (the
// quantity the progress watchdog judges). left is the time until the
// watchdog ends the session for it, when the watchdog is on. owed is
// false when no load is waiting on the data path (an idle session is
// silent too, and that proves nothing).
func (s *Session) DataSilence(now time.Time) (silent, left time.Duration, owed bool) {
	if s.phase != ready {
		return 0, 0, false
	}
	c := &s.client
	for _, l := range c.loads {
		if l.reported || l.dataEnded {
			continue
		}
		owed = true
		silent = max(silent, now.Sub(c.silentSince(l)))
	}
	if owed && s.cfg.StallTimeout > 0 {
		left = max(s.stallWindow()-silent, 0)
	}
	return silent, left, owed
}
