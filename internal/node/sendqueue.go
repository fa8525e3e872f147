package node

import (
	"net"
	"sync"
)

// sendQueues share the bytes control send queues may hold among their
// peers' sources, in two levels, as open rounds are (session.SourceQuota):
// all control connections from one source (the host of the connection's
// address) hold at most maxQueued together, and one connection at most
// maxQueued of its own. A host opens as many sessions as it likes (plain
// TCP lets it claim every port of its address), and each that never reads
// its answers made us queue maxQueued for it: 8 sessions, 8 times that.
//
// When a send takes a source over maxQueued, the source's connection that
// queues the most is closed (its session ends as a lost connection), and
// the next, until the source is within it. That connection holds more than
// its part, maxQueued/k for k connections of the source queueing anything,
// since the largest of k holds at least the average: a session of the host
// that reads its answers (a few frames queued) is not closed for the
// others' queues unless it queues the most. A lone connection keeps its
// whole maxQueued.
type sendQueues struct {
	mu  sync.Mutex
	src map[string]*sendShare
}

// sendShare is one source's queues. Its mu guards the queue fields of all
// its writers (a send may close another writer of the source), and queued.
type sendShare struct {
	mu      sync.Mutex
	name    string
	writers map[*msgWriter]struct{} // changed under sendQueues.mu and mu
	queued  int                     // bytes its writers' queues hold
}

// join returns nc's source's share, counting w in it; a nil q gives w a
// share of its own.
func (q *sendQueues) join(nc net.Conn, w *msgWriter) *sendShare {
	if q == nil {
		return &sendShare{writers: map[*msgWriter]struct{}{w: {}}}
	}
	name := sourceHost(nc)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.src == nil {
		q.src = map[string]*sendShare{}
	}
	sh := q.src[name]
	if sh == nil {
		sh = &sendShare{name: name, writers: map[*msgWriter]struct{}{}}
		q.src[name] = sh
	}
	sh.mu.Lock()
	sh.writers[w] = struct{}{}
	sh.mu.Unlock()
	return sh
}

// leave drops w from its share (its writer ended, maybe on a write
// error the loop has not heard of yet); the share goes with its source's
// last writer.
func (q *sendQueues) leave(w *msgWriter) {
	sh := w.share
	if q != nil {
		q.mu.Lock()
		defer q.mu.Unlock()
	}
	sh.mu.Lock()
	sh.drop(w) // a send after its writer ended queues nothing
	delete(sh.writers, w)
	last := len(sh.writers) == 0
	sh.mu.Unlock()
	if last && q != nil && q.src[sh.name] == sh {
		delete(q.src, sh.name)
	}
}

// queued returns what the control connections from source src queue.
func (q *sendQueues) queued(src string) int {
	q.mu.Lock()
	sh := q.src[src]
	q.mu.Unlock()
	if sh == nil {
		return 0
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.queued
}

// overflow drops the queues of the writers that take w's share over its
// bounds: w's own if it holds more than maxQueued, then the source's
// largest until the source holds at most maxQueued. It returns the
// writers dropped, to close once sh.mu is released. Called with sh.mu.
func (sh *sendShare) overflow(w *msgWriter) []*msgWriter {
	var out []*msgWriter
	if w.queued > maxQueued {
		sh.drop(w)
		out = append(out, w)
	}
	for sh.queued > maxQueued {
		var big *msgWriter
		for o := range sh.writers {
			if big == nil || o.queued > big.queued {
				big = o
			}
		}
		if big == nil || big.queued == 0 {
			break // cannot be: queued is its writers' sum
		}
		sh.drop(big)
		out = append(out, big)
	}
	return out
}

// drop ends w's queue: it is closing, and what it queued is forgotten.
// Called with sh.mu.
func (sh *sendShare) drop(w *msgWriter) {
	w.closing = true
	clear(w.queue)
	w.queue = nil
	sh.queued -= w.queued
	w.queued = 0
}
