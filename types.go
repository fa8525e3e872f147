package kvp2p

import (
	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// Key names one block: the engine's chained prefix hash (16 bytes).
type Key [16]byte

// Verdict is a lookup's answer: HIT, MISS or RETRY.
type Verdict uint8

// Lookup verdicts.
const (
	Retry Verdict = iota // not known yet; ask again next step
	Hit
	Miss
)

func (v Verdict) String() string { return v.internal().String() }

func (v Verdict) internal() session.Verdict {
	switch v {
	case Hit:
		return session.Hit
	case Miss:
		return session.Miss
	}
	return session.Retry
}

func verdictOf(v session.Verdict) Verdict {
	switch v {
	case session.Hit:
		return Hit
	case session.Miss:
		return Miss
	}
	return Retry
}

// Remote is one role of a request's transfer parameters: the peer that
// holds (or wants) its blocks, and the request id there.
type Remote struct {
	KVRequestID  string `json:"kv_request_id" yaml:"kv_request_id"`
	RemoteHost   string `json:"remote_host,omitempty" yaml:"remote_host,omitempty"`
	RemotePort   int    `json:"remote_port,omitempty" yaml:"remote_port,omitempty"`
	RemoteDomain string `json:"remote_domain,omitempty" yaml:"remote_domain,omitempty"`
}

// TransferParams are a request's kv_transfer_params (vLLM's role keys):
//   - RemotePrefiller: PD consumer; pull this request's blocks from the prefill rank.
//   - RemoteKVSource: symmetric consumer; look up, then pull the hits.
//   - RemoteDecoder: PD producer; hold the blocks until the decoder fetches them.
//
// The only legal combination of two keys is RemoteDecoder + RemoteKVSource.
type TransferParams struct {
	RemotePrefiller *Remote `json:"remote_prefiller,omitempty" yaml:"remote_prefiller,omitempty"`
	RemoteKVSource  *Remote `json:"remote_kv_source,omitempty" yaml:"remote_kv_source,omitempty"`
	RemoteDecoder   *Remote `json:"remote_decoder,omitempty" yaml:"remote_decoder,omitempty"`
}

func (p TransferParams) internal() loads.TransferParams {
	conv := func(r *Remote) *loads.Remote {
		if r == nil {
			return nil
		}
		c := loads.Remote(*r)
		return &c
	}
	return loads.TransferParams{
		RemotePrefiller: conv(p.RemotePrefiller), RemoteKVSource: conv(p.RemoteKVSource), RemoteDecoder: conv(p.RemoteDecoder),
	}
}

// JobKind says what a job did: a load (blocks pulled from a peer) or a
// store (blocks offered to a peer).
type JobKind uint8

// Job kinds in results.
const (
	JobLoad JobKind = iota + 1
	JobStore
)

// JobResult is the one terminal result of a load or store job.
type JobResult struct {
	Job    uint64
	Kind   JobKind
	ReqID  string // the engine's request id
	OK     bool
	Bytes  uint64
	Reason string // why it failed; "" when OK
}

func jobResultOf(r loads.JobResult) JobResult {
	k := JobKind(0)
	switch r.Kind {
	case loads.JobLoad:
		k = JobLoad
	case loads.JobStore:
		k = JobStore
	}
	return JobResult{Job: r.Job, Kind: k, ReqID: r.ReqID, OK: r.OK, Bytes: r.Bytes, Reason: r.Reason}
}

func jobResultsOf(rs []loads.JobResult) []JobResult {
	if rs == nil {
		return nil
	}
	out := make([]JobResult, len(rs))
	for i, r := range rs {
		out[i] = jobResultOf(r)
	}
	return out
}

// keys converts a key list to the core's type (a copy: Key and
// wire.Key are distinct types of the same 16 bytes).
func keys(ks []Key) []wire.Key {
	out := make([]wire.Key, len(ks))
	for i, k := range ks {
		out[i] = wire.Key(k)
	}
	return out
}

// Stats is a snapshot of a node's store: its slots by state.
type Stats struct {
	Free, Filling, Ready, Pinned int
}
