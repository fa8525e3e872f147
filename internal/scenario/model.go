package scenario

import (
	"fmt"
	"time"
)

// Scenario is one scenario file (design.md §7): a fleet, a workload and a
// fault timeline. The same value drives the simulator (virtual time) and the
// demo (wall time, real sockets).
type Scenario struct {
	Name     string
	Duration time.Duration // how long the run lasts
	Seed     int64
	Pods     []Pod
	Workload Workload
	Faults   []Fault // sorted by At
}

// Pod is a group of ranks that share a host label and, optionally, a
// failure domain. Rank r listens on Host:BasePort+r.
type Pod struct {
	Name     string
	Host     string
	Ranks    int
	BasePort int
	Domain   string // empty: each rank is its own domain
}

// Mode of the workload's requests.
type Mode string

const (
	ModePD        Mode = "pd"
	ModeSymmetric Mode = "symmetric"
	ModeMixed     Mode = "mixed" // each request picks pd or symmetric with equal odds
)

// Workload is the requests the consumers make.
type Workload struct {
	Mode       Mode
	Rate       float64 // requests per second per consumer rank
	Blocks     int     // blocks per request
	BlockBytes int
	Sources    []string // pod names: each request names a uniformly chosen rank of these
	Consumers  []string // pod names: every rank of these makes requests
	Start      time.Duration
	Stop       time.Duration
}

// FaultKind names a fault (design.md §7).
type FaultKind string

const (
	Crash           FaultKind = "crash"            // process gone, connections reset, dials refused
	CloseControl    FaultKind = "close-control"    // its connections reset once; the process lives on
	Blackhole       FaultKind = "blackhole"        // all traffic silently dropped
	BlackholeData   FaultKind = "blackhole-data"   // data connections silent, control alive
	Stall           FaultKind = "stall"            // process paused, connections open
	Slow            FaultKind = "slow"             // data path limited to BytesPerSec
	Delay           FaultKind = "delay"            // every message and byte takes Latency more
	GoodbyeIdle     FaultKind = "goodbye-idle"     // its sessions end in order, as an idle eviction
	RefuseHandshake FaultKind = "refuse-handshake" // new handshakes refused (incompatible)
	Restart         FaultKind = "restart"          // a new incarnation: the old one's connections reset
	Heal            FaultKind = "heal"             // ends every fault on the target
)

// Kinds lists every fault kind.
var Kinds = []FaultKind{Crash, CloseControl, Blackhole, BlackholeData, Stall, Slow, Delay, GoodbyeIdle, RefuseHandshake, Restart, Heal}

// CountsAsFault reports whether a request whose source had this fault
// during its life is "affected" (design.md §7: all but slow, delay,
// goodbye-idle; heal is not a fault).
func (k FaultKind) CountsAsFault() bool {
	switch k {
	case Slow, Delay, GoodbyeIdle, Heal:
		return false
	}
	return true
}

// Instant reports whether the fault happens at one moment rather than
// lasting until a heal: close-control and restart.
func (k FaultKind) Instant() bool { return k == CloseControl || k == Restart || k == GoodbyeIdle }

// Target is pod/rank, pod/a-b or pod/*.
type Target struct {
	Pod         string
	First, Last int // inclusive rank range
	All         bool
}

func (t Target) String() string {
	switch {
	case t.All:
		return t.Pod + "/*"
	case t.First == t.Last:
		return fmt.Sprintf("%s/%d", t.Pod, t.First)
	}
	return fmt.Sprintf("%s/%d-%d", t.Pod, t.First, t.Last)
}

// Has reports whether the target includes rank r of pod.
func (t Target) Has(pod string, r int) bool {
	return t.Pod == pod && (t.All || (r >= t.First && r <= t.Last))
}

// Fault is one entry of the fault timeline.
type Fault struct {
	At          time.Duration
	Kind        FaultKind
	Target      Target
	BytesPerSec int64         // slow
	Latency     time.Duration // delay
	Line        int           // line in the scenario file, for messages
}

// RankID names rank r of a pod as "pod/r".
func RankID(pod string, r int) string { return fmt.Sprintf("%s/%d", pod, r) }

// PeerID is the advertised host:port of rank r.
func (p Pod) PeerID(r int) string { return fmt.Sprintf("%s:%d", p.Host, p.BasePort+r) }

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
	Mode     Mode
	Arrived  time.Duration // since the run's start
	Resolved time.Duration // since the run's start; meaningless when Stuck
	Outcome  Outcome
	Bytes    uint64 // bytes loaded (hits)
	Corrupt  bool   // reported loaded but the bytes were wrong
}

// Window is one interval during which a rank had a fault that counts
// (CountsAsFault). To < 0 means it never healed; From == To is an instant.
type Window struct {
	Rank     string
	Kind     FaultKind
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

// Report is design.md §7's report for one (scenario, policy), with exactly
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
	Stuck          int    `json:"stuck"`
	// Censored is how many stuck requests the time statistics count with
	// their time so far (in ttf_ms if affected, else in tth_ms).
	Censored int `json:"censored"`
	TTFms    TTF `json:"ttf_ms"`
	// TTHms is arrival to a verified load, for hits; TTHDomainMs the same
	// for the hits whose source shared a failure domain with another rank
	// that had a fault while they were alive (the delay a policy imposes
	// on collateral requests).
	TTHms        TTF    `json:"tth_ms"`
	TTHDomainMs  TTF    `json:"tth_domain_ms"`
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
