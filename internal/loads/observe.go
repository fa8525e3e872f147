package loads

import (
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// Observer hears every job result as the table publishes it, for metrics.
// It is called in the table's goroutine and must neither block nor call
// back into the table.
type Observer interface {
	// JobSettled: r was published. submitted is when the job was
	// submitted; zero when it failed at submission.
	JobSettled(r JobResult, submitted time.Time)
	// LookupFellBack: a lookup answered MISS and marked request id
	// failed: the engine prefills it locally from now on. waited is how
	// long the request had been answered RETRY before; zero if never.
	LookupFellBack(reqID string, waited time.Duration)
	// LookupPendingIgnored: a peer's LookupPending named no lookup
	// outstanding on its session (answered or abandoned meanwhile, or
	// lookup_timeout off): it changed nothing.
	LookupPendingIgnored()
}

// Lookup answers whether key can be loaded for request id: HIT, MISS, or
// RETRY (ask again next step).
func (t *Table) Lookup(now time.Time, id string, k wire.Key) session.Verdict {
	return t.lookupObserved(now, id, k, health.GateOpen, false)
}

// lookupObserved is Lookup with lookup's g and asked.
func (t *Table) lookupObserved(now time.Time, id string, k wire.Key, g health.Gate, asked bool) session.Verdict {
	r := t.reqs[id]
	if t.cfg.Observer == nil || r == nil || r.src == nil {
		v := t.lookup(now, id, k, g, asked)
		t.settle(now)
		return v
	}
	from := r.waitFrom
	v := t.lookup(now, id, k, g, asked)
	// Count the first MISS a failed request's lookup answers, whether the
	// failure was decided inside this lookup or by a tick or reap since
	// the previous one (the settle step runs those between lookups).
	if _, failed := t.failed[r.src.kvID]; v == session.Miss && failed && !r.fellBack {
		r.fellBack = true
		var waited time.Duration
		if !from.IsZero() {
			waited = now.Sub(from)
		}
		t.cfg.Observer.LookupFellBack(id, waited)
	}
	t.settle(now)
	return v
}

// publish queues r for PollFinished and tells the observer.
func (t *Table) publish(r JobResult, submitted time.Time) {
	t.results = append(t.results, r)
	if t.cfg.Observer != nil {
		t.cfg.Observer.JobSettled(r, submitted)
	}
}

// ReasonUnboundTimeout is the reason of a PD store no fetch bound within
// UnboundStoreTimeout (vLLM's unbound_store_timeouts).
const ReasonUnboundTimeout = "unbound store timed out"
