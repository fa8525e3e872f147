package metrics

import (
	"fmt"
	"time"
)

// Snapshot is a node's state and counts at one instant, copied in its loop.
// It is what /status.json serves, what the status page and `kvp2p status`
// show and what a scrape turns into metrics. It shares nothing with the
// node: a handler may keep it as long as it likes.
type Snapshot struct {
	Node     Node       `json:"node"`
	Domains  []Domain   `json:"domains"` // sorted by name
	Loads    []Load     `json:"loads"`   // loads in flight, oldest first
	Stores   int        `json:"stores"`  // stores the node holds for remote decoders
	Requests int        `json:"requests"`
	Counters Counters   `json:"counters"`
	Hists    Histograms `json:"histograms"`
	// Find is the state of finding (docs/find.md); zero when it is off.
	Find Find `json:"find"`
}

// Find is what a node's finding holds at the snapshot.
type Find struct {
	Enabled bool `json:"enabled"`
	// Members: the deployment's members (find.peers and find.dns), this
	// node left out.
	Members int `json:"members"`
	// PeersUsable: peers whose summary FindSource uses now (whole, and
	// updated within find.max_age); PeersUnusable: held but not usable
	// (stale, or waiting for a snapshot after a refused part).
	PeersUsable   int `json:"peers_usable"`
	PeersUnusable int `json:"peers_unusable"`
	// OldestSec: how long ago the least recently updated usable summary
	// was; 0 with none.
	OldestSec float64 `json:"oldest_s"`
}

// Node describes the node itself.
type Node struct {
	PeerID        string    `json:"peer_id"`
	FailureDomain string    `json:"failure_domain"`
	Policy        string    `json:"policy"`
	Taken         time.Time `json:"taken"`
	UptimeSec     float64   `json:"uptime_s"`
	MaxPeers      int       `json:"max_peers"`
	// Listening: serving and not shutting down.
	Listening bool `json:"listening"`
	// EngineExpected: a sidecar (engine.socket set); EngineAttached: its
	// engine has registered a region.
	EngineExpected bool `json:"engine_expected"`
	EngineAttached bool `json:"engine_attached"`
	// Identity is what proves a peer's claim: mtls, plain-tcp or
	// plain-tcp-trust-claimed-host. SharedHosts are the hosts with two or
	// more ranks in view (this node and its peers); Exposure says what a
	// process on such a host can do here and how to close it (empty under
	// mTLS, or on plain TCP with no shared host in view).
	Identity    string   `json:"identity"`
	SharedHosts []string `json:"shared_hosts,omitempty"`
	Exposure    string   `json:"exposure,omitempty"`
}

// Ready is what /readyz answers: listening, and the engine registered
// when one is expected.
func (n Node) Ready() bool { return n.Listening && (!n.EngineExpected || n.EngineAttached) }

// Domain is one failure domain with its peers.
type Domain struct {
	Name  string `json:"name"`
	State string `json:"state"` // ok, suspect or ejected
	Peers []Peer `json:"peers"` // sorted by id
}

// Peer is one peer: what the policy holds about it and its sessions.
type Peer struct {
	ID            string    `json:"id"`
	Live          bool      `json:"live"`
	EjectedForSec float64   `json:"ejected_for_s,omitempty"` // ejection time left
	Probing       bool      `json:"probing,omitempty"`
	Delivering    bool      `json:"delivering,omitempty"` // under a check, and its data path delivered since it began: alive, its answer late (docs/liveness.md)
	Slow          bool      `json:"slow,omitempty"`       // a session to it is slow (Session.Slow)
	Faults        int       `json:"faults,omitempty"`
	Sessions      []Session `json:"sessions"`
}

// Session is one session with a peer.
type Session struct {
	Conn     uint64  `json:"conn"`
	Outbound bool    `json:"outbound"`
	State    string  `json:"state"` // connecting, ready, ended
	Cause    string  `json:"cause,omitempty"`
	AgeSec   float64 `json:"age_s"`
	BytesIn  uint64  `json:"bytes_in"`
	BytesOut uint64  `json:"bytes_out"`
	// LastProgressSec is how long ago its data path last moved bytes or
	// carried a Progress frame; -1 if it never did.
	LastProgressSec float64 `json:"last_progress_s"`
	// Slow: a load on it delivers, but too slowly to finish within its
	// load timeout with a margin (docs/liveness.md): alive, not faulty.
	Slow bool `json:"slow,omitempty"`
}

// Load is one load in flight.
type Load struct {
	Job    uint64  `json:"job"`
	ReqID  string  `json:"req_id"`
	Peer   string  `json:"peer"`
	Domain string  `json:"domain"`
	AgeSec float64 `json:"age_s"`
	Blocks int     `json:"blocks"`
	Bytes  uint64  `json:"bytes"`
}

// Counters are cumulative since the node started.
type Counters struct {
	LookupHits           uint64            `json:"lookup_hits"`
	LookupMisses         uint64            `json:"lookup_misses"`
	LoadsOK              uint64            `json:"loads_ok"`
	LoadFailures         uint64            `json:"load_failures"`
	LoadTimeouts         uint64            `json:"load_timeouts"`
	LoadsOverBudget      uint64            `json:"loads_over_budget"`
	LoadsTooSlow         uint64            `json:"loads_too_slow"`   // failed deliberately: too slow to finish in time (session.ReasonSlow)
	LookupFallbacks      uint64            `json:"lookup_fallbacks"` // requests a lookup MISS sent to local prefill
	LookupPending        PendingCounts     `json:"lookup_pending"`   // "still pending" answers (wire.LookupPending)
	StoresOK             uint64            `json:"stores_ok"`
	StoreFailures        uint64            `json:"store_failures"`
	UnboundStoreTimeouts uint64            `json:"unbound_store_timeouts"`
	PeerDisconnects      uint64            `json:"peer_disconnects"`
	SessionEnds          map[string]uint64 `json:"session_ends"` // by cause
	ProbesSent           uint64            `json:"probes_sent"`
	ProbesAcked          uint64            `json:"probes_acked"`
	ProbesFailed         uint64            `json:"probes_failed"`
	ProbesRenewed        uint64            `json:"probes_renewed"`
	Ejections            uint64            `json:"ejections"`
	SessionReplacements  uint64            `json:"session_replacements"`
	TakeoversRefused     uint64            `json:"takeovers_refused"`
	ConnsRefused         Refusals          `json:"conns_refused"` // before they became a session
	StallsDetected       uint64            `json:"stalls_detected"`
	BytesIn              uint64            `json:"bytes_in"`
	BytesOut             uint64            `json:"bytes_out"`
	FailedLoadBytes      uint64            `json:"failed_load_bytes"`
	Summaries            SummaryCounts     `json:"summaries"`
}

// PendingCounts count the "still pending" answers to lookups
// (wire.LookupPending) a node exchanged with its peers.
type PendingCounts struct {
	Sent     uint64 `json:"sent"`     // as a producer: its engine starved, a lookup kept waiting
	Received uint64 `json:"received"` // as a consumer, ignored ones included
	Ignored  uint64 `json:"ignored"`  // received for no outstanding lookup: changed nothing
}

// SummaryCounts count the summaries a node exchanged with its peers
// (docs/find.md), and what fed its own.
type SummaryCounts struct {
	Applied  uint64          `json:"applied"` // peers' parts applied
	Refused  SummaryRefusals `json:"refused"`
	BytesIn  uint64          `json:"bytes_in"`  // Summary frames received, as encoded
	BytesOut uint64          `json:"bytes_out"` // Summary frames sent, as encoded
	// ReportsRefused: stored-block reports (one a step) an engine made
	// that the summary could not take.
	ReportsRefused uint64 `json:"reports_refused"`
	DNSErrors      uint64 `json:"dns_errors"` // find.dns lookups that failed
}

// SummaryRefusals count peers' summary parts not applied, by reason.
type SummaryRefusals struct {
	Gap     uint64 `json:"gap"`     // not the next part of what the node holds: the peer is out until a new snapshot
	Format  uint64 `json:"format"`  // a summary format this node does not read
	Size    uint64 `json:"size"`    // a filter size over the bound or not a power of two
	Unready uint64 `json:"unready"` // from a connection whose session is not ready
	Other   uint64 `json:"other"`
}

// Refusals count accepted connections closed before they became a
// session, by where.
type Refusals struct {
	Gate     uint64 `json:"gate"`     // over max_handshakes or max_handshakes_per_source, or evicted to make room
	TLS      uint64 `json:"tls"`      // TLS handshake failed (no or untrusted certificate, allow_peers)
	Frame    uint64 `json:"frame"`    // first frame missing, oversized, malformed or not a Hello or DataAttach
	Identity uint64 `json:"identity"` // claimed peer id not covered by the certificate or the source address
}

// Clone returns a copy that shares nothing with c.
func (c Counters) Clone() Counters {
	out := c
	out.SessionEnds = make(map[string]uint64, len(c.SessionEnds))
	for k, v := range c.SessionEnds {
		out.SessionEnds[k] = v
	}
	return out
}

// Histograms are the node's distributions, in seconds except Blocks.
type Histograms struct {
	LookupRTT      Hist `json:"lookup_rtt"`
	FetchRTT       Hist `json:"fetch_rtt"`
	PostTime       Hist `json:"post_time"`
	TransferTime   Hist `json:"transfer_time"`
	TransferBlocks Hist `json:"transfer_blocks"`
	TimeToFallback Hist `json:"time_to_fallback"`        // failed loads, from submission
	LookupFallback Hist `json:"time_to_fallback_lookup"` // lookup fallbacks, from the request's first RETRY
	TimeToHit      Hist `json:"time_to_hit"`
}

// Fallbacks merges the two time-to-fallback histograms (same buckets).
func (h Histograms) Fallbacks() Hist {
	out := h.TimeToFallback.Clone()
	if !out.Valid() || len(h.LookupFallback.Counts) != len(out.Counts) {
		return out
	}
	for i, c := range h.LookupFallback.Counts {
		out.Counts[i] += c
	}
	out.Sum += h.LookupFallback.Sum
	out.Count += h.LookupFallback.Count
	return out
}

// NewHistograms returns empty histograms with kvp2p's buckets.
func NewHistograms() Histograms {
	return Histograms{
		LookupRTT: NewHist(LatencyBuckets()), FetchRTT: NewHist(LatencyBuckets()),
		PostTime: NewHist(LatencyBuckets()), TransferTime: NewHist(LatencyBuckets()),
		TransferBlocks: NewHist(BlockBuckets()),
		TimeToFallback: NewHist(LatencyBuckets()), LookupFallback: NewHist(LatencyBuckets()),
		TimeToHit: NewHist(LatencyBuckets()),
	}
}

// Clone returns a copy that shares nothing with h.
func (h Histograms) Clone() Histograms {
	return Histograms{
		LookupRTT: h.LookupRTT.Clone(), FetchRTT: h.FetchRTT.Clone(), PostTime: h.PostTime.Clone(),
		TransferTime: h.TransferTime.Clone(), TransferBlocks: h.TransferBlocks.Clone(),
		TimeToFallback: h.TimeToFallback.Clone(), LookupFallback: h.LookupFallback.Clone(),
		TimeToHit: h.TimeToHit.Clone(),
	}
}

// Valid checks what a decoded snapshot must hold before it is rendered:
// well-formed histograms.
func (h Histograms) Valid() error {
	for name, x := range map[string]Hist{
		"lookup_rtt": h.LookupRTT, "fetch_rtt": h.FetchRTT, "post_time": h.PostTime,
		"transfer_time": h.TransferTime, "transfer_blocks": h.TransferBlocks,
		"time_to_fallback": h.TimeToFallback, "time_to_fallback_lookup": h.LookupFallback,
		"time_to_hit": h.TimeToHit,
	} {
		if !x.Valid() {
			return fmt.Errorf("histogram %s: %d counts for %d bounds, or bounds not ascending", name, len(x.Counts), len(x.Bounds))
		}
	}
	return nil
}

// SlowPeers counts the peers marked Slow.
func (s *Snapshot) SlowPeers() int {
	n := 0
	for _, d := range s.Domains {
		for _, p := range d.Peers {
			if p.Slow {
				n++
			}
		}
	}
	return n
}

// SessionCount counts sessions by state.
func (s *Snapshot) SessionCount(state string) int {
	n := 0
	for _, d := range s.Domains {
		for _, p := range d.Peers {
			for _, x := range p.Sessions {
				if x.State == state {
					n++
				}
			}
		}
	}
	return n
}
