package kvp2p

import (
	"context"

	"github.com/kvp2p/kvp2p/internal/node"
)

// Manager is the engine-facing API of a node (vLLM's secondary-tier calls).
// Every method is safe for concurrent use: it runs in the node's loop and
// waits for it. After the node stopped, methods return ErrClosed or the
// fallback answer (MISS, a failed job).
type Manager struct{ m *node.Manager }

// NewRequest registers a request and its transfer parameters.
func (m *Manager) NewRequest(reqID string, p TransferParams) error {
	return m.m.NewRequest(reqID, p)
}

// Lookup reports whether key can be loaded for the request.
func (m *Manager) Lookup(reqID string, k Key) Verdict {
	return m.m.Lookup(reqID, k)
}

// LookupWait is Lookup that blocks until the verdict is HIT or MISS, or ctx
// ends (it then returns RETRY). The caller still flushes its probes with
// EndStep. After the node stopped it returns MISS, like Lookup.
func (m *Manager) LookupWait(ctx context.Context, reqID string, k Key) Verdict {
	return m.m.LookupWait(ctx, reqID, k)
}

// EndStep flushes this step's lookups to the peers (vLLM's
// on_schedule_end): a lookup's probe leaves at the end of the step that
// asked it.
func (m *Manager) EndStep() { m.m.EndStep() }

// SubmitLoad loads keys for the request into the node's store; the result
// comes from PollFinished.
func (m *Manager) SubmitLoad(reqID string, ks []Key) (uint64, error) {
	return m.m.SubmitLoad(reqID, ks)
}

// SubmitStore offers blocks put into the store (PutBlock) to the
// request's decoder; they stay pinned until the job's result.
func (m *Manager) SubmitStore(reqID string, ks []Key) (uint64, error) {
	return m.m.SubmitStore(reqID, ks)
}

// PollFinished returns the results of jobs finished since the last call.
// Every job submitted gets exactly one result: after the node stopped,
// PollFinished returns once what its shutdown settled, and a failed result
// for every job a Close cut short.
func (m *Manager) PollFinished() []JobResult { return m.m.PollFinished() }

// WaitFinished is PollFinished that blocks until there is at least one
// result, or ctx ends (it then returns nil): a caller with nothing else to
// do waits on the loop instead of polling. After the node stopped it
// returns what PollFinished would.
func (m *Manager) WaitFinished(ctx context.Context) []JobResult {
	return m.m.WaitFinished(ctx)
}

// RequestFinished ends a request on both sides.
func (m *Manager) RequestFinished(reqID string) { m.m.RequestFinished(reqID) }

// PutBlock writes a block the engine computed into the node's store, for
// peers to look up and load, and for SubmitStore to offer.
func (m *Manager) PutBlock(k Key, data []byte) error { return m.m.PutBlock(k, data) }

// ReadBlock copies a loaded or stored block out of the node's store.
func (m *Manager) ReadBlock(k Key) ([]byte, bool) { return m.m.ReadBlock(k) }

// ReadBlockInto is ReadBlock appending to dst: a caller that reads many
// blocks reuses one buffer instead of allocating a block each time.
func (m *Manager) ReadBlockInto(dst []byte, k Key) ([]byte, bool) {
	return m.m.ReadBlockInto(dst, k)
}

// Stats returns a snapshot of the store's slot counts; it fails if the
// store's invariants are broken.
func (m *Manager) Stats() (Stats, error) { return m.m.Stats() }

// Found is a source FindSource chose: a peer (host:port, what
// remote_kv_source names) and how many of the keys asked it probably holds.
type Found = node.Found

// FindSource returns the peer whose summary says it probably holds the
// longest prefix of ks beyond the first from (those held already), the
// least loaded among equals, never one the failure policy holds anything
// against; ok is false when none probably holds more, or Config.Find is
// off. Ask it with the ordinary symmetric lookup (a request naming it as
// remote_kv_source): its answer decides (docs/find.md).
func (m *Manager) FindSource(ks []Key, from int) (Found, bool) { return m.m.FindSource(ks, from) }
