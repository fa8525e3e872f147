package loads

import (
	"errors"
	"fmt"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/store"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// The scheduler calls. Each runs in the table's owner goroutine.

// ErrUnknownRequest is returned for a request id the table does not know.
var ErrUnknownRequest = errors.New("loads: unknown request")

// NewRequest registers a request and its transfer parameters. A consumer
// request opens (or reuses) a session to its source; if the policy or the
// cap refuses one, the request is marked failed and its lookups are MISS.
// Bad parameters are refused with an error and the request is registered
// without a P2P role (MISS for lookups, stores succeed locally).
func (t *Table) NewRequest(now time.Time, id string, p TransferParams) error {
	src, dst, err := parseParams(p)
	if old := t.reqs[id]; old != nil && old.src != nil {
		t.forgetSrc(old.src.kvID)
	}
	t.reqs[id] = &request{id: id, src: src, dst: dst}
	if err != nil {
		t.reqs[id].src, t.reqs[id].dst = nil, nil
		return err
	}
	t.named(now, dst)
	if src != nil {
		t.liveSrc[src.kvID]++
		if t.session(now, src.peer, src.domain) == nil {
			t.markFailed(src.kvID, "no session to its source (refused by the failure policy or the peer cap)")
		}
	}
	t.settle(now)
	return nil
}

// lookup is Lookup without the observer. If asked, g is the policy's
// Gate for this lookup, asked already (by LookupBatch): it is not asked
// again.
func (t *Table) lookup(now time.Time, id string, k wire.Key, g health.Gate, asked bool) session.Verdict {
	r := t.reqs[id]
	if r == nil || r.src == nil {
		return session.Miss
	}
	if _, bad := t.failed[r.src.kvID]; bad {
		return session.Miss
	}
	c := t.byPeer[r.src.peer]
	if c == nil || c.s.Ended() != health.CauseNone {
		// A request already waiting under the policy (for a handshake or a
		// probe) whose session just ended is retried on demand within its
		// budget: the probe it waited on may have been sent before a heal.
		if !r.waitFrom.IsZero() && !r.redialed && t.mayWait(now, r, t.waits(now, r)) {
			r.redialed = true // once: a refused or dead peer is not dialed in a loop
			if t.session(now, r.src.peer, r.src.domain) != nil {
				return session.Retry
			}
		}
		return session.Miss
	}
	if c.s.Pending() {
		// A load is never queued behind a handshake. per-peer and host-group
		// fall back at once (#64501); a policy may let lookups wait a little.
		if w := t.waits(now, r); unanswered(now, c, w) {
			// The attempt went into a partition: one fresh attempt (the
			// partition may have healed), then no more waiting on it.
			if !r.redialed && t.mayWait(now, r, w) {
				r.redialed = true
				if t.session(now, r.src.peer, r.src.domain) != nil {
					return session.Retry
				}
			}
		} else if w.Handshake > 0 && t.mayWait(now, r, w) {
			if now.Sub(c.s.PendingSince()) < w.Handshake {
				return session.Retry
			}
			if r.redialed && c.raced {
				// It dialed afresh, and the peer refused the fresh attempt
				// as a duplicate of this older one, which took its place
				// (promoteRacer): the peer read this one's Hello and kept
				// it, so its handshake is the likeliest to finish. Waited
				// on within the budget (mayWait above), however old.
				return session.Retry
			}
			if !r.redialed && c.s.Outbound() {
				// The attempt it waited on is stale (sent into a partition
				// that may have healed): one fresh attempt, within its budget.
				r.redialed = true
				if t.session(now, r.src.peer, r.src.domain) != nil {
					return session.Retry
				}
			}
		}
		t.markFailed(r.src.kvID, "its source's handshake did not finish within the request's wait")
		return session.Miss
	}
	if t.silentPath(now, r, c) {
		// Evidence of death building up on this session
		// (health.Waits.Silent): no new load goes into a data path that
		// owes bytes and is silent; the request waits for its verdict.
		if !t.mayWait(now, r, t.silentWaits(now, r, c)) {
			t.markFailed(r.src.kvID, "its source's data path owes bytes and is silent, past the request's wait")
			return session.Miss
		}
		return session.Retry
	}
	if !asked {
		g = t.policy.Gate(now, t.peerOf(c))
	}
	switch g {
	case health.GateWait:
		t.askPolicy = true // the probe it holds the lookup for
		if !t.mayWait(now, r, t.waits(now, r)) {
			t.markFailed(r.src.kvID, "its source is under a probe whose verdict did not come within the request's wait")
			return session.Miss
		}
		return session.Retry
	case health.GateMiss:
		t.markFailed(r.src.kvID, "the failure policy refuses its source (suspect, ejected or quarantined)")
		return session.Miss
	}
	if r.src.pd {
		return session.Hit
	}
	v := c.s.RegisterLookup(r.src.kvID, k)
	t.markDirty(c)
	if v == session.Retry && !c.flush {
		c.flush = true
		t.flushQ = append(t.flushQ, c)
	}
	return v
}

// EndStep flushes the lookups registered this step (on_schedule_end).
func (t *Table) EndStep(now time.Time) {
	q := t.flushQ
	t.flushQ = nil
	for _, c := range q {
		c.flush = false
		if c.rep != reaped && c.st != connGone {
			c.s.FlushLookups(now)
			t.touch(c)
		}
	}
	t.settle(now)
}

func (t *Table) newJob(kind JobKind, req, kvID string) *job {
	t.nextJob++
	j := &job{id: t.nextJob, kind: kind, req: req, kvID: kvID}
	return j
}

func (t *Table) failNow(j *job, why string) uint64 {
	t.publish(JobResult{Job: j.id, Kind: j.kind, ReqID: j.req, Reason: why}, j.at)
	return j.id
}

// SubmitLoad starts loading keys for request id into freshly reserved
// slots. It always returns a job id; a load that cannot start fails at once
// (its result is in the next PollFinished) and the request is marked failed.
func (t *Table) SubmitLoad(now time.Time, id string, keys []wire.Key) uint64 {
	j := t.submitLoad(now, id, keys, nil)
	t.settle(now)
	return j
}

// SubmitLoadInto is SubmitLoad into the slots the engine names, block i
// into into[i] (ExternalSlots): each must be Free, or the load fails at once.
func (t *Table) SubmitLoadInto(now time.Time, id string, keys []wire.Key, into []store.Slot) uint64 {
	if len(into) != len(keys) {
		return t.failNow(t.newJob(JobLoad, id, ""), "keys and slots differ in length")
	}
	j := t.submitLoad(now, id, keys, into)
	t.settle(now)
	return j
}

// Holds reports whether a job still holds slots: a failed load keeps its
// destination slots until no peer write can land in them.
func (t *Table) Holds(job uint64) bool {
	_, ok := t.jobs[job]
	return ok
}

func (t *Table) submitLoad(now time.Time, id string, keys []wire.Key, into []store.Slot) uint64 {
	r := t.reqs[id]
	if r == nil || r.src == nil {
		return t.failNow(t.newJob(JobLoad, id, ""), "no source")
	}
	j := t.newJob(JobLoad, id, r.src.kvID)
	j.at = now
	if len(keys) == 0 {
		t.publish(JobResult{Job: j.id, Kind: JobLoad, ReqID: id, OK: true}, now)
		return j.id
	}
	if t.shuttingDown {
		t.markFailed(r.src.kvID, "shutting down")
		return t.failNow(j, "shutting down")
	}
	c := t.byPeer[r.src.peer]
	if c == nil || !c.s.Ready() {
		t.log.Warn("submit_load without a ready session", "job_id", j.id, "peer", r.src.peer)
		t.markFailed(r.src.kvID, "load submitted without a ready session")
		return t.failNow(j, "no session")
	}
	slots := make([]store.Slot, 0, len(keys))
	for i, k := range keys {
		var sl store.Slot
		var err error
		if into != nil {
			sl, err = into[i], t.store.ReserveAt(into[i], k)
		} else {
			sl, err = t.store.Reserve(k)
		}
		if err != nil {
			for _, s := range slots {
				_ = t.store.CancelFill(s)
			}
			why := fmt.Sprintf("no destination slot: %v", err)
			t.markFailed(r.src.kvID, why)
			return t.failNow(j, why)
		}
		slots = append(slots, sl)
	}
	if err := c.s.RequestBlocks(now, j.id, r.src.kvID, keys, slots, r.src.pd); err != nil {
		for _, s := range slots {
			_ = t.store.CancelFill(s)
		}
		t.markFailed(r.src.kvID, "load refused by its session: "+err.Error())
		return t.failNow(j, err.Error())
	}
	j.slots, j.keys, j.conn = slots, keys, c.id
	for _, k := range keys {
		t.filling[k]++
	}
	t.jobs[j.id] = j
	t.touch(c)
	return j.id
}

// SubmitStore offers the blocks of keys, already written into the store by
// the engine, to the decoder of request id. They stay pinned until the
// store job's result.
func (t *Table) SubmitStore(now time.Time, id string, keys []wire.Key) uint64 {
	j := t.submitStore(now, id, keys)
	t.settle(now)
	return j
}

func (t *Table) submitStore(now time.Time, id string, keys []wire.Key) uint64 {
	r := t.reqs[id]
	if r == nil || r.dst == nil {
		j := t.newJob(JobStore, id, "")
		t.publish(JobResult{Job: j.id, Kind: JobStore, ReqID: id, OK: true}, now)
		return j.id // not a remote-decode request: nothing to serve
	}
	j := t.newJob(JobStore, id, r.dst.kvID)
	j.at = now
	if r.dst.kvID == "" {
		return t.failNow(j, "remote_decoder without kv_request_id")
	}
	if t.wasReaped(now, r.dst.kvID) {
		return t.failNow(j, "request's stores were reaped")
	}
	bound := t.bound[r.dst.kvID]
	if bound != nil && bound.s.Ended() != health.CauseNone {
		bound = nil
	}
	if bound == nil && t.shuttingDown {
		// Only a transfer in flight is drained; nothing new is parked.
		return t.failNow(j, "shutting down")
	}
	slots := make([]store.Slot, 0, len(keys))
	for _, k := range keys {
		sl, ok := t.store.PinKey(k)
		if !ok {
			for _, s := range slots {
				_ = t.store.Unpin(s)
			}
			return t.failNow(j, fmt.Sprintf("block %x not in the store", k[:4]))
		}
		slots = append(slots, sl)
	}
	j.slots, j.keys = slots, keys
	t.jobs[j.id] = j
	if c := bound; c != nil {
		j.conn = c.id
		c.s.AddStoredBlocks(now, r.dst.kvID, keys, slots, j.id)
		t.touch(c)
		return j.id
	}
	t.log.Debug("parked submit_store", "req", r.dst.kvID, "job_id", j.id)
	t.moveJob(j, jobParked)
	t.unbound[r.dst.kvID] = append(t.unbound[r.dst.kvID], unboundBatch{job: j.id, keys: keys, slots: slots, at: now})
	return j.id
}

// RequestFinished ends request id on both sides: a consumer's loads in
// flight are aborted (their results come at once, their slots later) and
// its lookup closed; a producer's demand that cannot be met fails now.
func (t *Table) RequestFinished(now time.Time, id string) {
	r := t.reqs[id]
	if r == nil {
		return
	}
	delete(t.reqs, id)
	if r.src != nil {
		// The finish publishes the failure of loads in flight; the id leaves
		// the failed set after that, or it would stay there for ever.
		t.forgetSrc(r.src.kvID)
		if c := t.byPeer[r.src.peer]; c != nil {
			c.s.FinishConsumer(now, r.src.kvID)
			t.touch(c)
		}
		if t.liveSrc[r.src.kvID] == 0 {
			delete(t.failed, r.src.kvID)
		}
	}
	if r.dst != nil && r.dst.kvID != "" {
		if len(t.unbound[r.dst.kvID]) == 0 {
			delete(t.decoders, r.dst.kvID) // else kept until a fetch or the reaper settles them
		}
		if c := t.bound[r.dst.kvID]; c != nil {
			delete(t.bound, r.dst.kvID)
			c.s.FinishProducer(now, r.dst.kvID)
			t.touch(c)
		} else if len(t.unbound[r.dst.kvID]) > 0 {
			t.finished[r.dst.kvID] = true // the reaper or a late fetch settles it
		}
	}
	t.settle(now)
}

func (t *Table) forgetSrc(kvID string) {
	if t.liveSrc[kvID]--; t.liveSrc[kvID] <= 0 {
		delete(t.liveSrc, kvID)
	}
}

// Shutdown starts an orderly stop: no new sessions; transfers in flight get
// up to ShutdownDrain to finish, then every session says goodbye.
func (t *Table) Shutdown(now time.Time) {
	if t.shuttingDown {
		return
	}
	t.shuttingDown = true
	t.shutdownAt = now
	t.Tick(now)
}

// Drained reports whether shutdown has finished: every session closed and
// its data path quiet, every job settled.
func (t *Table) Drained() bool {
	return t.shutdownClose && len(t.conns) == 0 && len(t.jobs) == 0
}

// mayWait starts or checks a request's wait budget: however the sessions it
// waits on come and go, it waits for one handshake and one probe at most.
// The budget is the policy's when the request begins to wait (w), fixed
// from then on.
func (t *Table) mayWait(now time.Time, r *request, w health.Waits) bool {
	if r.waitFrom.IsZero() {
		r.waitFrom = now
		r.budget = w.Budget
	}
	return now.Sub(r.waitFrom) < r.budget
}

// silentPath reports whether r's source's session c owes data-path bytes
// and has delivered nothing for the policy's Waits.Silent.
func (t *Table) silentPath(now time.Time, r *request, c *conn) bool {
	w := t.waits(now, r)
	if w.Silent <= 0 {
		return false
	}
	silent, _, owed := c.s.DataSilence(now)
	return owed && silent >= w.Silent
}

// silentWaits is the policy's waits for a request held by silentPath: its
// budget, if it begins to wait now, also covers the time left until the
// progress watchdog's verdict on the silent session.
func (t *Table) silentWaits(now time.Time, r *request, c *conn) health.Waits {
	w := t.waits(now, r)
	if r.waitFrom.IsZero() {
		_, left, _ := c.s.DataSilence(now)
		w.Budget += left
	}
	return w
}

// waits is the policy's waits for r's source.
func (t *Table) waits(now time.Time, r *request) health.Waits {
	return t.policy.Waits(now, health.Peer{ID: r.src.peer, Domain: r.src.domain})
}
