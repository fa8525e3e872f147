package loads

import "time"

// Observer hears every job result as the table publishes it, for metrics.
// It is called in the table's goroutine and must neither block nor call
// back into the table.
type Observer interface {
	// JobSettled: r was published. submitted is when the job was
	// submitted; zero when it failed at submission.
	JobSettled(r JobResult, submitted time.Time)
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
