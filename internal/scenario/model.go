package scenario

import (
	"fmt"
	"time"
)

// Scenario is one scenario file (docs/design.md §7): a fleet, a workload and a
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

// FaultKind names a fault (docs/design.md §7).
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
// during its life is "affected" (docs/design.md §7: all but slow, delay,
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
