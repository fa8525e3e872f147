package loads

import (
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// EndOutboundIdle says Goodbye (idle) to every ready session this node
// dialed that has nothing in flight, and returns how many it ended. A
// sidecar calls it while no engine is attached: the sessions its gone
// engine opened serve nobody, and holding them until the idle timeout only
// keeps peers' resources. Sessions peers dialed stay: they are the peers'.
func (t *Table) EndOutboundIdle(now time.Time) int {
	n := 0
	for _, c := range t.list {
		if c.st == connGone || !c.s.Outbound() || !c.s.Ready() || c.s.Busy() || c.s.Ended() != health.CauseNone {
			continue
		}
		c.s.Goodbye(now, wire.GoodbyeIdle)
		t.touch(c)
		n++
	}
	t.settle(now)
	return n
}

// FailUnboundStores fails every parked PD store (no decoder fetched it
// yet) at once, and returns how many jobs it failed: a sidecar's engine is
// gone, so no decoder may read its chunks any more, and its restarted
// engine must get them back without waiting for the unbound timeout.
func (t *Table) FailUnboundStores(now time.Time, reason string) int {
	n := 0
	for id, batches := range t.unbound {
		for _, b := range batches {
			t.storeDoneJob(b.job, false, reason)
			n++
		}
		delete(t.unbound, id)
		delete(t.finished, id)
		delete(t.decoders, id) // a late fetch is refused as reaped
		t.markFailed(id, reason)
		t.reaped[id] = now
	}
	t.settle(now)
	return n
}

// ProducerGone tells the table that the engine whose blocks this node
// serves to PD decoders is gone (a sidecar's engine detached), and returns
// how many PD request ids peers' sessions were fetching or waiting on. No store will come
// for any request now, whether that engine registered it or not (a
// decoder-first fetch waits for a request the prefiller has not registered
// yet), so every PD fetch not yet fully served fails at once: its decoder
// hears TransferDone(failed) and falls back instead of waiting for its PD
// load timeout. The gone engine's producer ids and the fetched ones are
// reaped: a fetch for them later, even once a new engine attached, is
// refused within a round trip. Until ProducerBack every new fetch is
// refused the same way. Parked stores are FailUnboundStores' (the caller
// retires their chunks first).
func (t *Table) ProducerGone(now time.Time) int {
	t.noProducer = true
	for _, r := range t.reqs {
		if r.dst != nil && r.dst.kvID != "" {
			t.reaped[r.dst.kvID] = now
		}
	}
	return t.finishProducers(now)
}

// ProducerStalled tells the table that the engine producing here is
// attached but has stopped stepping (a sidecar's probe went unanswered):
// the PD fetches peers' sessions are fetching or waiting on fail at once,
// as in ProducerGone, and their ids are reaped (the decoders fell back; a
// store for them later is refused). Unlike ProducerGone it leaves the
// engine's other requests alone and refuses no new fetch: the engine may
// step again, and a fetch that comes meanwhile waits for the next probe.
// It returns how many ids failed.
func (t *Table) ProducerStalled(now time.Time) int { return t.finishProducers(now) }

// SayLookupsPending tells the peers whose lookups are parked here waiting
// on a key for which waiting is true that those lookups are still worked
// on (wire.LookupPending; their lookup deadline re-arms, within its cap):
// the sidecar's engine was asked for the key and is starved of CPU, not
// stopped. It returns how many it told.
func (t *Table) SayLookupsPending(now time.Time, waiting func(wire.Key) bool) int {
	n := 0
	for _, c := range t.list {
		if c.st == connGone || c.s.Ended() != health.CauseNone {
			continue
		}
		if m := c.s.SayPending(now, waiting); m > 0 {
			n += m
			t.touch(c)
		}
	}
	t.settle(now)
	return n
}

// ProducerWaits is how many PD request ids peers' sessions are fetching or
// waiting on here (what ProducerStalled would fail).
func (t *Table) ProducerWaits() int {
	n := 0
	for _, c := range t.list {
		if c.st == connGone || c.s.Ended() != health.CauseNone {
			continue
		}
		n += c.s.WaitingProducers()
	}
	return n
}

// finishProducers fails every PD fetch not yet fully served and reaps its id.
func (t *Table) finishProducers(now time.Time) int {
	n := 0
	for _, c := range t.list {
		if c.st == connGone || c.s.Ended() != health.CauseNone {
			continue
		}
		ids := c.s.FinishProducers(now)
		for _, id := range ids {
			if t.bound[id] == c {
				delete(t.bound, id)
			}
			t.reaped[id] = now
		}
		if len(ids) > 0 {
			n += len(ids)
			t.touch(c)
		}
	}
	t.settle(now)
	return n
}

// ProducerBack tells the table that an engine produces here again (a
// sidecar's engine attached): a fetch for an id not reaped waits for its
// stores again, as a decoder-first fetch does.
func (t *Table) ProducerBack() { t.noProducer = false }
