package kvp2p

import (
	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/node"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// The request and result types are the node's own, named here: one
// definition each, in the package that decides with it, so that a value or
// field added there is this package's too. The comments on the named types
// are their documentation.
type (
	// Key names one block: the engine's chained prefix hash (16 bytes).
	Key = wire.Key

	// Verdict is a lookup's answer: HIT, MISS or RETRY.
	Verdict = session.Verdict

	// Remote is one role of a request's transfer parameters: the peer
	// that holds (or wants) its blocks, and the request id there.
	Remote = loads.Remote
	// TransferParams are a request's kv_transfer_params (vLLM's role
	// keys: remote_prefiller, remote_kv_source, remote_decoder).
	TransferParams = loads.TransferParams

	// JobKind says what a job did: a load (blocks pulled from a peer) or
	// a store (blocks offered to a peer).
	JobKind = loads.JobKind
	// JobResult is the one terminal result of a load or store job.
	JobResult = loads.JobResult

	// Stats is a snapshot of a node's store: its slots by state.
	Stats = node.Stats
)

// Lookup verdicts.
const (
	Retry = session.Retry // not known yet; ask again next step
	Hit   = session.Hit
	Miss  = session.Miss
)

// Job kinds in results.
const (
	JobLoad  = loads.JobLoad
	JobStore = loads.JobStore
)
