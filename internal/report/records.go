package report

import (
	"time"

	"github.com/kvp2p/kvp2p/internal/scenario"
)

// Outcome of one request.
type Outcome uint8

const (
	Stuck    Outcome = iota // unresolved at the end of the run
	Hit                     // loaded and verified
	Fallback                // the engine was told to prefill locally
)

// Request is what a run records of one request.
type Request struct {
	ID       string
	Consumer string // pod/rank
	Source   string // pod/rank
	Mode     scenario.Mode
	Arrived  time.Duration // since the run's start
	Resolved time.Duration // since the run's start; meaningless when Stuck
	Outcome  Outcome
	Bytes    uint64 // bytes loaded (hits)
	Corrupt  bool   // reported loaded but the bytes were wrong
	// Deliberate: a Fallback the consumer chose (its load was too slow to
	// finish within its deadline, or queued past its start budget:
	// session.Deliberate), not one a fault forced on it.
	Deliberate bool
}

// Window is one interval during which a rank had a fault that counts
// (CountsAsFault). To < 0 means it never healed; From == To is an instant.
type Window struct {
	Rank     string
	Kind     scenario.FaultKind
	From, To time.Duration
}

// TTF summarises a set of times, in milliseconds: time to fallback
// (ttf_ms) or time to hit (tth_ms, tth_domain_ms). A request unresolved
// when the run ends is a censored sample: its time so far, a lower bound.
// A percentile that falls on a censored sample is itself only a lower
// bound, and says so (p99_censored...): the table prints it as ">=".
type TTF struct {
	P50         float64 `json:"p50"`
	P99         float64 `json:"p99"`
	Max         float64 `json:"max"`
	N           int     `json:"n"`        // samples
	Censored    int     `json:"censored"` // of which unresolved at the end
	P50Censored bool    `json:"p50_censored,omitempty"`
	P99Censored bool    `json:"p99_censored,omitempty"`
	MaxCensored bool    `json:"max_censored,omitempty"`
}

// Report is docs/design.md §7's report for one (scenario, policy), with exactly
// its field names in JSON, and what issue 8 added: censored samples, time
// to hit, slots measured while running, and the ablation's labels.
type Report struct {
	Scenario       string `json:"scenario"`
	Policy         string `json:"policy"`
	Timers         string `json:"timers,omitempty"`          // "vllm", "kvp2p"; empty: the policy's preset
	DomainsDropped bool   `json:"domains_dropped,omitempty"` // every pod's domain label removed from the nodes
	Requests       int    `json:"requests"`
	Hits           int    `json:"hits"`
	Fallbacks      int    `json:"fallbacks"`
	Affected       int    `json:"affected"`
	FalseFallbacks int    `json:"false_fallbacks"`
	// DeliberateFallbacks are the fallbacks the consumer chose (Request.
	// Deliberate): counted in Fallbacks, never in FalseFallbacks.
	DeliberateFallbacks int `json:"deliberate_fallbacks"`
	Stuck               int `json:"stuck"`
	// Censored is how many stuck requests the time statistics count with
	// their time so far (in ttf_ms if affected, else in tth_ms).
	Censored int `json:"censored"`
	TTFms    TTF `json:"ttf_ms"`
	// TTHms is arrival to a verified load, for hits; TTHDomainMs the same
	// for the hits whose source shared a failure domain with another rank
	// that had a fault while they were alive (the delay a policy imposes
	// on collateral requests).
	TTHms       TTF `json:"tth_ms"`
	TTHDomainMs TTF `json:"tth_domain_ms"`
	// TTHHealthyMs is TTHms over the hits that were not affected (their
	// source had no fault while they were alive): what a policy costs
	// healthy requests. TTHms also counts affected hits, which a policy
	// that waits through a short fault turns from fallbacks into late hits.
	TTHHealthyMs TTF    `json:"tth_healthy_ms"`
	CorruptLoads int    `json:"corrupt_loads"`
	LeakedSlots  int    `json:"leaked_slots"`
	BytesLoaded  uint64 `json:"bytes_loaded"`
	// PeakSlots is the most store slots Filling or Pinned at once across
	// the fleet, and OrphanSlots the most of them at once that no live
	// job, pin or parked store owned, both checked at every engine step
	// (the simulator; -1 when a driver does not measure them).
	PeakSlots   int `json:"peak_slots"`
	OrphanSlots int `json:"orphan_slots"`
}

// Run is one policy's run of a scenario: its records and its report, as
// the commands collect them and the timeline (internal/chart) draws them.
type Run struct {
	Policy   string
	Requests []Request
	Report   Report
}
