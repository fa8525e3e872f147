package health

import (
	"fmt"
	"sort"
	"time"
)

func sortPeers(ps []Peer) { sort.Slice(ps, func(i, j int) bool { return ps[i].ID < ps[j].ID }) }

// Policy is the seam between sessions' ends and the rest of the fleet.
// The table tells it when sessions come up and end, what loads did and
// what probes answered; it answers which other sessions must close in the
// same reap, whether a peer may be dialed, whether a lookup for a request
// naming a peer may proceed, and what to probe or close on its own
// (Decisions, taken after every call). Implementations are pure: no I/O,
// no clock; single-owner. Work per event is bounded by the size of the
// affected host or domain, never by the size of the fleet.
type Policy interface {
	// Name is the configuration name of the policy.
	Name() string
	// SessionUp: a session to p completed its handshake.
	SessionUp(now time.Time, p Peer)
	// SessionEnded is called once per session end the reap sees. It
	// returns the peers whose sessions must close in the same reap, through
	// the same teardown.
	SessionEnded(now time.Time, p Peer, e End) []Peer
	// MayDial reports whether a new outbound session to p may be opened now.
	MayDial(now time.Time, p Peer) bool
	// Waits says how long lookups for a request naming p may wait. It
	// only reads the policy's state (it is asked at every lookup).
	Waits(now time.Time, p Peer) Waits
	// Gate says whether a lookup for a request naming p (whose session is
	// ready) may answer now, must wait (RETRY), or must fall back. At one
	// instant it is idempotent: asked again for p at the same now with no
	// other call between, it answers the same and decides nothing more
	// (the table asks it once for a run of one request's keys,
	// loads.Table.LookupBatch; TestGateIdempotentAtOneInstant).
	Gate(now time.Time, p Peer) Gate
	// LoadDone reports a load's end on p's session.
	LoadDone(now time.Time, p Peer, ok bool)
	// ProbeAck reports that p's data path answered probe seq.
	ProbeAck(now time.Time, p Peer, seq uint64)
	// Tick runs the policy's timers.
	Tick(now time.Time)
	// NextDeadline is the earliest instant at which Tick may decide or
	// change anything (a probe's deadline, a periodic prune), and true; or
	// false when no Tick ever would until another call. Decisions not yet
	// taken are due at once (the zero time). A Tick before it is a no-op,
	// so an owner may skip it (loads.Table.NextDeadline).
	NextDeadline() (time.Time, bool)
	// TakeDecisions returns what the policy decided to do on its own.
	TakeDecisions() []Decision
}

// Starver is implemented by a policy that keeps data-path deadlines of its
// own (domain's probes): Starved(d) moves each running one d later, because
// the process could not have observed an answer while it was starved of CPU
// for d (loads.Table.Starved).
type Starver interface {
	Starved(d time.Duration)
}

// Witness is implemented by a policy that judges data paths by their own
// traffic (domain): DataSeen(now, p) tells it that p's data path delivered
// bytes or a frame at now (docs/liveness.md). It returns whether the policy
// still wants to hear of p's data (a check of p runs); the caller may stop
// telling it until the policy next probes p.
type Witness interface {
	DataSeen(now time.Time, p Peer) bool
}

// Waits bounds how long a lookup may hold a request (RETRY) for a peer.
// The zero value never waits: MISS at once while a handshake is pending
// (vLLM #64501), and no dial is ever replaced.
type Waits struct {
	// Handshake: a lookup answers RETRY while the peer's handshake has
	// been pending for less than this; zero means MISS at once.
	Handshake time.Duration
	// StaleDial: a connect attempt pending this long is replaced on demand
	// by a fresh one (it may have gone into a partition that has healed
	// since); zero: never replaced.
	StaleDial time.Duration
	// Budget bounds how long one request may wait in all (for a
	// handshake, then a probe), however the sessions it waits on come and
	// go. It is fixed when the request begins to wait.
	Budget time.Duration
	// Silent: a lookup to a peer whose session owes data-path bytes and
	// has delivered nothing for this long is not answered HIT on that
	// session (a load put on it would wait behind whatever holds the
	// rest: a blackholed stream in retransmission backoff, say). It
	// waits (RETRY) for the session's verdict: bytes again, or the
	// progress watchdog's end of it, after which the request redials on
	// demand. Its budget is Budget plus the time left to the watchdog.
	// Zero: never (vLLM's policies, which have no watchdog).
	Silent time.Duration
	// Unanswered: a connect attempt whose first connection the peer's
	// kernel has not answered (no SYN-ACK, no RST) for this long went into
	// a partition. A kernel answers within a round trip, however busy or
	// stopped its process is, so such an attempt is replaced on demand,
	// and a lookup waits on it no longer: one fresh attempt (within its
	// budget), then MISS. A request then neither waits out a partition
	// nor, after it heals, waits on an attempt made into it. Zero: never.
	Unanswered time.Duration
}

// End describes one session's end.
type End struct {
	Cause Cause
	// Refused: the connect attempt itself was refused (nothing listens at
	// the peer's address: its process is gone), as opposed to a handshake
	// that timed out or that a live peer refused.
	Refused bool
	// Restart: the peer came back with a new incarnation; the old one's end
	// is not held against the new one.
	Restart bool
	// LoadsFailed is how many loads the end failed.
	LoadsFailed int
	// ByPolicy: the table closed it because the policy decided so (a probe
	// went unanswered).
	ByPolicy bool
	// WasUp: SessionUp was reported for this session.
	WasUp bool
}

// Gate is a policy's answer for a lookup.
type Gate uint8

const (
	GateOpen Gate = iota // answer normally
	GateWait             // answer RETRY: a probe is under way
	GateMiss             // fall back
)

// DecisionKind says what the table must do for the policy.
type DecisionKind uint8

const (
	// DecideProbe: send a data-path probe with Seq on Peer's session.
	DecideProbe DecisionKind = iota + 1
	// DecideClose: close Peer's session with Cause.
	DecideClose
	// DecideNote: nothing to do; Note says what changed (an ejection, its
	// lift) for the operator's log.
	DecideNote
)

// Decision is one thing the policy asks the table to do.
type Decision struct {
	Kind  DecisionKind
	Peer  string
	Seq   uint64
	Cause Cause
	Note  string
}

// Policy names.
const (
	PerPeer   = "per-peer"
	HostGroup = "host-group"
	Domain    = "domain"
)

// Names lists the policies New accepts, the default first.
func Names() []string { return []string{Domain, PerPeer, HostGroup} }

// Options configures the policies that have knobs.
type Options struct {
	// HostQuarantine is how long host-group refuses new outbound sessions to
	// a host after one of its sessions died (PR #64678: 10 s).
	HostQuarantine time.Duration
	// Domain policy knobs (docs/design.md §5).
	ProbeTimeout       time.Duration // 250 ms
	ConnectWait        time.Duration // 250 ms: how long a lookup waits for a pending handshake
	EjectionBase       time.Duration // 10 s
	EjectionCap        time.Duration // 300 s
	MaxEjectionPercent int           // 50
	FlapThreshold      int           // faults without a successful load in between before ejection; 3
	SuspectHold        time.Duration // how long a domain whose probe failed stays suspect; EjectionBase
	// RefusedHold is how long after a connect attempt that failed (refused,
	// or its handshake refused) the domain policy dials that peer no more
	// on demand; 50 ms. It spans the same request's on-demand redial one
	// engine step later, so that a request naming a dead rank falls back
	// on its second step, not its third, and is short enough that a rank
	// that comes back is dialed again at once (never a blacklist).
	RefusedHold time.Duration
	// UnansweredDial is the domain policy's Waits.Unanswered; 50 ms: a
	// hundred round trips within a data centre, where kvp2p's peers are
	// (a peer further away than that needs it raised).
	UnansweredDial time.Duration
	// SilenceWindow is how long a rank whose data path delivered since its
	// check began may go without a delivery before it counts as dead
	// (docs/liveness.md); the stall timeout, and never less than
	// ProbeTimeout (which judges a rank not heard from at all).
	SilenceWindow time.Duration
}

// New builds the named policy.
func New(name string, opt Options) (Policy, error) {
	switch name {
	case PerPeer:
		return &perPeer{}, nil
	case HostGroup:
		q := opt.HostQuarantine
		if q <= 0 {
			q = 10 * time.Second
		}
		return &hostGroup{quarantine: q, until: map[string]time.Time{}, hosts: map[string]map[string]Peer{}}, nil
	case Domain:
		return newDomain(opt), nil
	}
	return nil, fmt.Errorf("health: unknown policy %q (want %s, %s or %s)", name, Domain, PerPeer, HostGroup)
}

// vllmBase is what the two vLLM policies share: they never probe, gate or
// hold a lookup, and dial whenever asked; each adds its own SessionEnded
// (and host-group its own MayDial).
type vllmBase struct{}

func (vllmBase) Waits(time.Time, Peer) Waits        { return Waits{} }
func (vllmBase) Gate(time.Time, Peer) Gate          { return GateOpen }
func (vllmBase) LoadDone(time.Time, Peer, bool)     {}
func (vllmBase) ProbeAck(time.Time, Peer, uint64)   {}
func (vllmBase) Tick(time.Time)                     {}
func (vllmBase) NextDeadline() (time.Time, bool)    { return time.Time{}, false }
func (vllmBase) TakeDecisions() []Decision          { return nil }
func (vllmBase) SessionUp(time.Time, Peer)          {}
func (vllmBase) MayDial(now time.Time, p Peer) bool { return true }

// perPeer is vLLM main: a dead session is reaped alone; nothing else changes.
type perPeer struct{ vllmBase }

func (*perPeer) Name() string                             { return PerPeer }
func (*perPeer) SessionEnded(time.Time, Peer, End) []Peer { return nil }

// hostGroup is PR #64678's group_peers_by_host. Any session end the reap
// sees (idle eviction and failed handshakes included, exactly as the PR did:
// that is what its review objected to) closes every other session to the
// same host, and quarantines the host for new outbound sessions. Inbound
// sessions are still accepted: a sibling that is control-alive could
// reconnect at once.
type hostGroup struct {
	vllmBase
	quarantine time.Duration
	until      map[string]time.Time       // host -> end of quarantine
	hosts      map[string]map[string]Peer // host -> live sessions
	stats      Stats                      // for View
}

func (*hostGroup) Name() string { return HostGroup }

func (h *hostGroup) SessionUp(_ time.Time, p Peer) {
	host := HostOf(p.ID)
	if h.hosts[host] == nil {
		h.hosts[host] = map[string]Peer{}
	}
	h.hosts[host][p.ID] = p
}

func (h *hostGroup) SessionEnded(now time.Time, p Peer, _ End) []Peer {
	host := HostOf(p.ID)
	h.until[host] = now.Add(h.quarantine)
	h.stats.Ejections++
	delete(h.hosts[host], p.ID)
	var out []Peer
	for _, q := range h.hosts[host] {
		out = append(out, q)
	}
	sortPeers(out)        // deterministic order for the simulator
	delete(h.hosts, host) // the table closes them all in this reap
	return out
}

func (h *hostGroup) MayDial(now time.Time, p Peer) bool {
	host := HostOf(p.ID)
	t, ok := h.until[host]
	if !ok {
		return true
	}
	if !now.Before(t) {
		delete(h.until, host)
		return true
	}
	return false
}
