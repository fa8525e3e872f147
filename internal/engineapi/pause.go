package engineapi

import "time"

// pauseGuard tells an engine's silence from the sidecar's own: the Attach
// loop wakes at least every ping interval (its ticker), so a gap of more
// than two intervals between wake-ups means the sidecar itself did not run
// (SIGSTOP, a paused VM, a starved machine). Its timers then fire at the
// resume, before the engine's answers queued in the socket are read, and
// without the guard a sidecar paused for EngineTimeout detached a live
// engine and served no request of it again (the fault lab's `stall` of
// 3 s or more did this every time). After such a gap both engine timers
// start again; a dead engine is then found one EngineTimeout later.
type pauseGuard struct {
	every time.Duration // the ping interval
	last  time.Time     // the loop's last wake-up; zero before the first
}

// woke records a wake-up of the loop at now and reports whether the loop
// had not run for more than two ping intervals before it.
func (g *pauseGuard) woke(now time.Time) bool {
	paused := !g.last.IsZero() && now.Sub(g.last) > 2*g.every
	g.last = now
	return paused
}
