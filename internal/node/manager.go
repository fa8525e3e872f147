package node

import (
	"context"
	"fmt"
	"time"

	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// Key names one block: the engine's chained prefix hash (16 bytes).
type Key = wire.Key

// Verdict is a lookup's answer: HIT, MISS or RETRY.
type Verdict = session.Verdict

// Lookup verdicts.
const (
	Retry = session.Retry
	Hit   = session.Hit
	Miss  = session.Miss
)

// TransferParams are a request's kv_transfer_params; Remote is one role.
type (
	TransferParams = loads.TransferParams
	Remote         = loads.Remote
	JobResult      = loads.JobResult
)

// Job kinds in results.
const (
	JobLoad  = loads.JobLoad
	JobStore = loads.JobStore
)

// Manager is the engine-facing API of a node (vLLM's secondary-tier calls).
// Every method is safe for concurrent use: it runs in the node's loop and
// waits for it. After the node stopped, methods return ErrClosed or the
// fallback answer (MISS, a failed job).
type Manager struct{ n *Node }

// call is a function the loop runs for a caller; done (cap 1), if set,
// gets one value once f returned.
type call struct {
	f    func(now time.Time)
	done chan struct{}
}

// callDoneFree is how many reply channels a node keeps for reuse: more
// than the callers that wait on it at once in practice (an engine's few
// threads); a burst beyond allocates and drops the extra.
const callDoneFree = 64

// do runs f in the loop and waits. The reply channel comes from the node's
// free list and goes back to it once its one value was taken, so a call
// allocates no channel and no wrapper closure of its own (only f, the
// caller's).
func (m *Manager) do(f func(now time.Time)) error {
	var done chan struct{}
	select {
	case done = <-m.n.callDone:
	default:
		done = make(chan struct{}, 1)
	}
	select {
	case m.n.calls <- call{f: f, done: done}:
	case <-m.n.done:
		m.n.putCallDone(done)
		return ErrClosed
	}
	<-done // the loop took the call, so it runs it before it exits
	m.n.putCallDone(done)
	return nil
}

// putCallDone returns an empty reply channel to the free list, or drops it
// when the list is full.
func (n *Node) putCallDone(done chan struct{}) {
	select {
	case n.callDone <- done:
	default:
	}
}

// NewRequest registers a request and its transfer parameters.
func (m *Manager) NewRequest(reqID string, p TransferParams) error {
	var err error
	if e := m.do(func(now time.Time) { err = m.n.tb.NewRequest(now, reqID, p) }); e != nil {
		return e
	}
	return err
}

// Lookup reports whether key can be loaded for the request.
func (m *Manager) Lookup(reqID string, k Key) Verdict {
	v := Miss
	_ = m.do(func(now time.Time) { v = m.n.tb.Lookup(now, reqID, k) })
	return v
}

// EndStep flushes this step's lookups to the peers (on_schedule_end).
func (m *Manager) EndStep() { _ = m.do(func(now time.Time) { m.n.tb.EndStep(now) }) }

// SubmitLoad loads keys for the request into the node's store; the result
// comes from PollFinished.
func (m *Manager) SubmitLoad(reqID string, keys []Key) (uint64, error) {
	var j uint64
	err := m.do(func(now time.Time) {
		j = m.n.tb.SubmitLoad(now, reqID, keys)
		m.n.open[j] = JobResult{Job: j, Kind: JobLoad, ReqID: reqID, Reason: "node closed"}
	})
	return j, err
}

// SubmitStore offers blocks the engine put into the store to the
// request's decoder; they stay pinned until the job's result.
func (m *Manager) SubmitStore(reqID string, keys []Key) (uint64, error) {
	var j uint64
	err := m.do(func(now time.Time) {
		j = m.n.tb.SubmitStore(now, reqID, keys)
		m.n.open[j] = JobResult{Job: j, Kind: JobStore, ReqID: reqID, Reason: "node closed"}
	})
	return j, err
}

// PollFinished returns the results of jobs finished since the last call.
// Every job submitted gets exactly one result: after the node stopped,
// PollFinished returns once what its shutdown settled, and a failed result
// for every job a Close cut short.
func (m *Manager) PollFinished() []JobResult {
	var r []JobResult
	err := m.do(func(time.Time) {
		r = m.n.takeResults()
		for _, x := range r {
			delete(m.n.open, x.Job)
		}
	})
	if err != nil {
		return m.n.finalResults()
	}
	return r
}

// WaitFinished is PollFinished that blocks until there is at least one
// result, or ctx ends (it then returns nil). A caller with nothing else to
// do waits on the loop instead of polling: each poll is a hop into the
// loop, and a short sleep between polls costs up to a millisecond (the
// runtime's poller sleeps in whole milliseconds when the process is idle),
// which is most of a small load's time. After the node stopped it returns
// what PollFinished would.
func (m *Manager) WaitFinished(ctx context.Context) []JobResult {
	for {
		if r := m.PollFinished(); len(r) > 0 {
			return r
		}
		select {
		case <-m.n.settled: // settled since the poll, or before it: look again
		case <-ctx.Done():
			return nil
		case <-m.n.done:
			return m.PollFinished()
		}
	}
}

// RequestFinished ends a request on both sides.
func (m *Manager) RequestFinished(reqID string) {
	_ = m.do(func(now time.Time) { m.n.tb.RequestFinished(now, reqID) })
}

// PutBlock writes a block the engine computed into the node's store.
func (m *Manager) PutBlock(k Key, data []byte) error {
	var err error
	if e := m.do(func(time.Time) { _, err = m.n.st.Put(k, data) }); e != nil {
		return e
	}
	return err
}

// ReadBlock copies a loaded or stored block out of the node's store.
func (m *Manager) ReadBlock(k Key) ([]byte, bool) { return m.ReadBlockInto(nil, k) }

// ReadBlockInto is ReadBlock appending to dst: a caller that reads many
// blocks reuses one buffer instead of allocating a block each time.
func (m *Manager) ReadBlockInto(dst []byte, k Key) ([]byte, bool) {
	out := dst
	var ok bool
	_ = m.do(func(time.Time) {
		if m.n.sc != nil {
			return // a sidecar's blocks are in its engine's region
		}
		sl, found := m.n.st.Lookup(k)
		if found {
			out, ok = append(dst, m.n.st.Bytes(sl)...), true
		}
	})
	return out, ok
}

// Evictions reports how many Ready blocks the node's store has evicted
// (their slots reused for other keys) since the node started. A block a
// load committed can leave the store only this way, so a reader that finds
// a loaded block missing while this count did not move has found a bug,
// not an eviction (the demo's read-back and the corrupt-load stress use it).
func (m *Manager) Evictions() uint64 {
	var n uint64
	_ = m.do(func(time.Time) { n = m.n.st.Stats().Evictions })
	return n
}

// Stats is a snapshot of a node's store.
type Stats struct {
	Free, Filling, Ready, Pinned int
}

// Stats returns a snapshot of the store's slot counts.
func (m *Manager) Stats() (Stats, error) {
	var s Stats
	var check error
	err := m.do(func(time.Time) {
		st := m.n.st.Stats()
		s = Stats{Free: st.Free, Filling: st.Filling, Ready: st.Ready, Pinned: st.Pinned}
		check = m.n.st.Check()
	})
	if err != nil {
		return s, err
	}
	if check != nil {
		return s, fmt.Errorf("kvp2p: store invariant broken: %w", check)
	}
	return s, nil
}
