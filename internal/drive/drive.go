package drive

import (
	"context"
	"fmt"
	"time"

	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/wire"
	"github.com/kvp2p/kvp2p/internal/workload"
)

// Steps calls step every period of wall time until end, then last once,
// and returns. now is the time since zero; due is the wall time the step
// was due, so that time.Since(due) is how late it started. A step that
// ends after the next one was due does not make the next ones come in a
// burst to catch up: the schedule restarts from then. Steps returns ctx's
// error if it ends first, or the first error of step.
func Steps(ctx context.Context, zero time.Time, end, period time.Duration,
	step func(now time.Duration, due time.Time) error, last func(now time.Duration)) error {
	next := time.Now()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		now := time.Since(zero)
		if now >= end {
			last(now)
			return nil
		}
		if err := step(now, next); err != nil {
			return err
		}
		next = next.Add(period)
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		} else {
			next = time.Now() // running late: do not try to catch up in a burst
		}
	}
}

// Warm opens a session from nd to src before time 0, as a fleet that has
// been running has them: it makes a request to src (ids prefix-0,
// prefix-1, ...) and looks a key up until the lookup hits, every retry,
// until deadline. A fresh request per try, because per-peer and
// host-group answer MISS while the handshake is pending, and a request
// that missed stays missed. It reports whether a lookup hit; an error is
// a request refused, or ctx's.
func Warm(ctx context.Context, nd workload.Node, src workload.Source, prefix string, deadline time.Time, retry time.Duration) (bool, error) {
	for n := 0; time.Now().Before(deadline); n++ {
		id := fmt.Sprintf("%s-%d", prefix, n)
		if err := nd.NewRequest(id, workload.Params(src, id, true)); err != nil {
			return false, err
		}
		hit := nd.Lookup(id, wire.Key{}) == session.Hit
		nd.RequestFinished(id)
		if hit {
			return true, nil
		}
		if err := Sleep(ctx, retry); err != nil {
			return false, err
		}
	}
	return false, nil
}

// Sleep waits d, or until ctx ends, whose error it then returns.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
