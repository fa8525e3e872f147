package health

import (
	"fmt"
	"sort"
	"time"
)

// domainPolicy is kvp2p's default (docs/design.md §5). Only fault causes count.
// A fault turns the peer's failure domain suspect at once and every live
// sibling is probed over its data path; siblings that answer within
// ProbeTimeout keep their sessions and loads, the rest are closed at once.
// While the domain is suspect a request naming one of its members waits
// (RETRY) for that member's probe, then loads or falls back. A rank that
// cannot be reached is simply retried on the next request (never
// blacklisted), without a wait once a dial to it was refused; a rank that
// connects but keeps failing loads is ejected for a time that doubles on
// repeats up to a cap, lifted early by a successful half-open probe; never
// more than MaxEjectionPercent of known domains are ejected at once (at
// least one may be). Restarts, Goodbyes, idle eviction,
// incompatibility and failed handshakes are not evidence of anything.
type domainPolicy struct {
	opt     Options
	peers   map[string]*peerHealth
	domains map[string]*domainHealth
	seq     uint64
	probes  map[uint64]string // outstanding probe seq -> peer
	out     []Decision
	stats   Stats     // for View
	pruned  time.Time // last prune
}

type peerHealth struct {
	peer         Peer
	domain       string
	live         bool      // a ready session exists (ups > 0)
	ups          int       // ready sessions: briefly two while a restarted peer's new one replaces the old
	probeSeq     uint64    // outstanding probe, 0 if none
	probeFirst   uint64    // the check's first probe: renewals keep the check, and an answer to any of its probes counts
	probeBy      time.Time // its deadline
	heardAt      time.Time // its data path's last delivery since the check began (DataSeen); zero: silent so far
	verified     uint64    // the suspicion epoch this peer last answered a probe in
	faults       int       // faults since its last successful load
	ejections    int       // how many times ejected (the doubling exponent)
	ejectedUntil time.Time
	halfOpen     bool      // ejected, but one probe may lift it
	mustProbe    bool      // its last session ended in a fault: its next must prove its data path
	probeRound   bool      // the outstanding probe is part of its domain's suspicion round
	refusedUntil time.Time // a connect attempt failed: no dial on demand before then
	refused      bool      // its last connect attempt was refused: nothing listens there
	lastSeen     time.Time // last call that named it: pruned after forgetAfter of silence
}

type domainHealth struct {
	members      map[string]*peerHealth
	epoch        uint64    // bumped at every fault: probes answer for an epoch
	suspectUntil time.Time // a failed probe keeps the domain suspect until then
	probing      int       // round probes outstanding (a rank's own re-check does not count)
	failed       bool      // a probe of the current epoch went unanswered
	ejected      int       // members currently ejected
}

func newDomain(o Options) *domainPolicy {
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = 250 * time.Millisecond
	}
	if o.ConnectWait <= 0 {
		o.ConnectWait = 250 * time.Millisecond
	}
	if o.EjectionBase <= 0 {
		o.EjectionBase = 10 * time.Second
	}
	if o.EjectionCap <= 0 {
		o.EjectionCap = 300 * time.Second
	}
	if o.MaxEjectionPercent <= 0 {
		o.MaxEjectionPercent = 50
	}
	if o.FlapThreshold <= 0 {
		o.FlapThreshold = 3
	}
	if o.SuspectHold <= 0 {
		o.SuspectHold = o.EjectionBase
	}
	if o.RefusedHold <= 0 {
		o.RefusedHold = 50 * time.Millisecond
	}
	if o.UnansweredDial <= 0 {
		o.UnansweredDial = 50 * time.Millisecond
	}
	if o.SilenceWindow < o.ProbeTimeout {
		o.SilenceWindow = o.ProbeTimeout
	}
	return &domainPolicy{opt: o, peers: map[string]*peerHealth{}, domains: map[string]*domainHealth{}, probes: map[uint64]string{}}
}

func (*domainPolicy) Name() string { return Domain }

// Waits: a lookup waits a little for a pending handshake, so that
// re-opening a session (after an idle eviction, say) costs no fallback,
// and for one handshake and one probe in all, even if the sessions it
// waits on keep being replaced; a connect attempt that outlived the
// handshake wait is replaced on demand (it may have gone into a partition
// that has healed since). A peer whose last connect attempt was refused
// is not waited on: its process is gone, and a dial pending to it now
// will most likely be refused too; MISS at once, as per-peer does, while
// the dial goes on (a rank that came back is used as soon as its session
// is up).
//
// A peer whose data path was last seen dead gets the same full wait. A
// shorter one, with the probe renewed every 50 ms, was tried (sim-8c) and
// backed out: in the simulator a renewal after a heal is answered at once,
// but on real TCP a probe travels on the data connection, which after a
// blackhole is in retransmission backoff; renewals went unanswered until
// the probe deadline closed and redialed the session, and the lab's
// pod-partial had 12 false fallbacks in the ~0.8 s after the heal.
func (d *domainPolicy) Waits(now time.Time, p Peer) Waits {
	w := Waits{Handshake: d.opt.ConnectWait, StaleDial: d.opt.ConnectWait, Budget: d.opt.ConnectWait + d.opt.ProbeTimeout,
		Silent: d.opt.ProbeTimeout, Unanswered: d.opt.UnansweredDial}
	if ph := d.peers[p.ID]; ph != nil && ph.refused {
		w.Handshake = 0
	}
	return w
}

func (d *domainPolicy) peer(now time.Time, p Peer) *peerHealth {
	ph := d.peers[p.ID]
	var dom string
	switch {
	case ph == nil:
		d.makeRoom()
		ph = &peerHealth{peer: p}
		d.peers[p.ID] = ph
		dom = DomainOf(p)
	case p.Domain == "":
		// A call that names no domain (a dial for a request that named
		// none, before the hello) keeps the one the peer is known in.
		// (Not DomainOf: this runs per looked-up key, and DomainOf builds
		// a string for a peer without a domain.)
		dom = ph.domain
	default:
		dom = p.Domain
	}
	if ph.domain != dom {
		old := d.domains[ph.domain]
		if old != nil {
			delete(old.members, p.ID)
			if len(old.members) == 0 {
				delete(d.domains, ph.domain) // not a known domain any more
			}
		}
		ph.domain = dom
		ph.peer = p
		ph.verified = 0 // an epoch of the old domain
		dh := d.domains[dom]
		if dh == nil {
			dh = &domainHealth{members: map[string]*peerHealth{}, epoch: 1}
			d.domains[dom] = dh
		}
		dh.members[p.ID] = ph
		// What the peer counts in its domain moves with it.
		if old != nil && ph.probeSeq != 0 && ph.probeRound {
			old.probing--
			dh.probing++
		}
		if old != nil && !ph.ejectedUntil.IsZero() {
			old.ejected--
			dh.ejected++
		}
	}
	ph.lastSeen = now
	return ph
}

func (d *domainPolicy) SessionUp(now time.Time, p Peer) {
	ph := d.peer(now, p)
	ph.ups++
	ph.live = true
	ph.refused = false
	dh := d.domains[ph.domain]
	// A new session into a suspect domain, or to a rank whose last session
	// faulted, proves its data path first.
	if round := d.suspect(now, dh) && ph.verified != dh.epoch; round || ph.mustProbe {
		d.probe(now, ph, round)
	}
}

func (d *domainPolicy) suspect(now time.Time, dh *domainHealth) bool {
	return dh.probing > 0 || now.Before(dh.suspectUntil)
}

// probe asks ph's data path to answer. A round probe is part of its
// domain's suspicion (the domain stays suspect while one is outstanding); a
// rank's own re-check after its fault is not.
func (d *domainPolicy) probe(now time.Time, ph *peerHealth, round bool) {
	if ph.probeSeq != 0 || !ph.live {
		return
	}
	d.seq++
	ph.probeSeq = d.seq
	ph.probeFirst = d.seq
	ph.probeBy = now.Add(d.opt.ProbeTimeout)
	ph.probeRound = round
	ph.heardAt = time.Time{}
	d.probes[d.seq] = ph.peer.ID
	if round {
		d.domains[ph.domain].probing++
	}
	d.out = append(d.out, Decision{Kind: DecideProbe, Peer: ph.peer.ID, Seq: d.seq})
}

func (d *domainPolicy) endProbe(ph *peerHealth) {
	if ph.probeSeq == 0 {
		return
	}
	delete(d.probes, ph.probeSeq)
	ph.probeSeq, ph.probeFirst = 0, 0
	ph.heardAt = time.Time{}
	if ph.probeRound {
		d.domains[ph.domain].probing--
	}
	ph.probeRound = false
}

func (d *domainPolicy) SessionEnded(now time.Time, p Peer, e End) []Peer {
	ph := d.peer(now, p)
	if e.WasUp && ph.ups > 0 {
		ph.ups--
	}
	ph.live = ph.ups > 0
	if !ph.live {
		d.endProbe(ph)
	}
	d.ejected(now, ph) // an ejection that ran out ends before this end counts
	if !e.WasUp && (e.Cause == CauseHandshakeFailed || e.Cause == CauseIncompatible) {
		// The connect attempt failed (refused, or its hello refused): a
		// redial on demand a step later would fail the same way and only
		// keep the request waiting. Not evidence against the domain.
		ph.refusedUntil = now.Add(d.opt.RefusedHold)
	}
	if !e.WasUp {
		// Refused only if nothing listened: a hello refused, or a handshake
		// that timed out, comes from a process that may well be alive.
		ph.refused = e.Refused
	}
	dh := d.domains[ph.domain]
	if !e.Cause.IsFault() || e.Restart {
		d.maybeClear(dh) // it may have been the last sibling under probe
		return nil
	}
	// Flapping is a rank that connects but keeps failing loads: sessions
	// that die with loads on them, without a successful load in between. A
	// session closed by a failed probe before any load does not count, so a
	// rank behind a dead data path is not ejected, only probed per use, and
	// is used again as soon as it heals.
	if e.LoadsFailed > 0 {
		ph.faults++
		if ph.faults >= d.opt.FlapThreshold {
			d.eject(now, ph, dh)
		}
	}
	// Whatever its siblings show, this rank proves its data path before its
	// next session carries a load.
	ph.mustProbe = true
	if e.ByPolicy {
		// Closed because its probe went unanswered: the domain is suspect
		// already and its siblings are being probed; no new round.
		return nil
	}
	// The domain turns suspect at once: a new epoch, and every live sibling
	// proves its data path again. New sessions into it prove theirs while it
	// stays suspect.
	dh.epoch++
	dh.failed = false
	dh.suspectUntil = now.Add(d.opt.SuspectHold)
	for _, id := range sortedIDs(dh.members) {
		if sib := dh.members[id]; sib != ph && sib.live {
			d.endProbe(sib)
			d.probe(now, sib, true)
		}
	}
	return nil
}

// maybeClear ends the suspicion once every live sibling answered its probe.
func (d *domainPolicy) maybeClear(dh *domainHealth) {
	if dh.probing == 0 && !dh.failed && d.anyLive(dh) {
		dh.suspectUntil = time.Time{}
	}
}

func (d *domainPolicy) anyLive(dh *domainHealth) bool {
	for _, m := range dh.members {
		if m.live {
			return true
		}
	}
	return false
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func sortedIDs(m map[string]*peerHealth) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// eject takes a flapping peer out for a time that doubles per repeat, if
// the cap on ejected domains allows.
func (d *domainPolicy) eject(now time.Time, ph *peerHealth, dh *domainHealth) {
	if d.ejected(now, ph) {
		return
	}
	// Ejections end lazily: lift the ones that ran out before counting.
	ejectedDomains := 0
	for _, o := range d.domains {
		if o.ejected > 0 {
			for _, m := range o.members {
				d.ejected(now, m)
			}
			if o.ejected > 0 {
				ejectedDomains++
			}
		}
	}
	if dh.ejected == 0 {
		allowed := len(d.domains) * d.opt.MaxEjectionPercent / 100
		if allowed < 1 {
			allowed = 1
		}
		if ejectedDomains >= allowed {
			d.note(ph, fmt.Sprintf("flapping, not ejected: %d of %d domains ejected already (max %d%%)",
				ejectedDomains, len(d.domains), d.opt.MaxEjectionPercent))
			return // the cap: never eject more than this much of the fleet
		}
	}
	dur := d.ejectionFor(ph.ejections)
	ph.ejectedUntil = now.Add(dur)
	ph.ejections++
	ph.halfOpen = false
	dh.ejected++
	d.stats.Ejections++
	d.note(ph, fmt.Sprintf("ejected for %v: %d sessions in a row failed loads", dur, ph.faults))
}

// note tells the operator's log what changed.
func (d *domainPolicy) note(ph *peerHealth, what string) {
	d.out = append(d.out, Decision{Kind: DecideNote, Peer: ph.peer.ID, Note: what})
}

// ejectionFor is the length of the n+1th ejection in a row: EjectionBase
// doubled n times, at most EjectionCap (without overflow).
func (d *domainPolicy) ejectionFor(n int) time.Duration {
	dur := d.opt.EjectionBase
	for ; n > 0 && dur < d.opt.EjectionCap; n-- {
		if dur > d.opt.EjectionCap/2 {
			return d.opt.EjectionCap
		}
		dur *= 2
	}
	return min(dur, d.opt.EjectionCap)
}

func (d *domainPolicy) ejected(now time.Time, ph *peerHealth) bool {
	if ph.ejectedUntil.IsZero() {
		return false
	}
	if !now.Before(ph.ejectedUntil) {
		d.lift(ph)
		return false
	}
	return true
}

func (d *domainPolicy) lift(ph *peerHealth) {
	if ph.ejectedUntil.IsZero() {
		return
	}
	ph.ejectedUntil = time.Time{}
	ph.halfOpen = false
	ph.faults = 0
	d.domains[ph.domain].ejected--
	d.note(ph, "ejection lifted")
}

// MayDial refuses ejected peers, except for one half-open attempt once
// half the ejection has passed, and, for RefusedHold, a peer whose connect
// attempt just failed. Unreachable peers are otherwise retried on demand.
func (d *domainPolicy) MayDial(now time.Time, p Peer) bool {
	ph := d.peer(now, p)
	if now.Before(ph.refusedUntil) {
		return false
	}
	if !d.ejected(now, ph) {
		return true
	}
	half := ph.ejectedUntil.Add(-d.ejectionFor(ph.ejections-1) / 2)
	if !ph.halfOpen && !now.Before(half) {
		ph.halfOpen = true
		return true
	}
	return false
}

func (d *domainPolicy) Gate(now time.Time, p Peer) Gate {
	ph := d.peer(now, p)
	if d.ejected(now, ph) && !ph.halfOpen {
		return GateMiss
	}
	dh := d.domains[ph.domain]
	round := d.suspect(now, dh) && ph.verified != dh.epoch
	if ph.halfOpen || ph.mustProbe || round {
		if ph.probeSeq == 0 {
			d.probe(now, ph, round)
		}
		if !ph.heardAt.IsZero() && !ph.halfOpen {
			// Its data path delivered since the check began: alive, so
			// its requests do not wait for the verdict (the check goes on
			// and still closes it if it falls silent).
			return GateOpen
		}
		return GateWait
	}
	return GateOpen
}

func (d *domainPolicy) LoadDone(now time.Time, p Peer, ok bool) {
	if !ok {
		return // the session's end, if any, is what counts
	}
	ph := d.peer(now, p)
	ph.faults = 0
	if d.ejected(now, ph) {
		d.lift(ph)
	}
	ph.ejections = 0
}

func (d *domainPolicy) ProbeAck(now time.Time, p Peer, seq uint64) {
	ph := d.peer(now, p)
	if seq == 0 || ph.probeSeq == 0 || seq < ph.probeFirst || seq > ph.probeSeq {
		return // not an answer to the running check (a renewal's earlier probe is)
	}
	d.endProbe(ph)
	dh := d.domains[ph.domain]
	ph.verified = dh.epoch
	ph.mustProbe = false
	if ph.halfOpen {
		d.lift(ph) // a successful half-open probe lifts the ejection early
	}
	d.maybeClear(dh)
}

// Starved moves every running check's deadline d later (Starver): the
// process could not have heard a ProbeAck while it was starved of CPU.
func (d *domainPolicy) Starved(dur time.Duration) {
	if dur <= 0 {
		return
	}
	for seq, id := range d.probes {
		// A check with renewed probes is indexed under each: move it once.
		if ph := d.peers[id]; ph != nil && ph.probeSeq == seq {
			ph.probeBy = ph.probeBy.Add(dur)
			if !ph.heardAt.IsZero() {
				ph.heardAt = ph.heardAt.Add(dur) // its silence meanwhile is not counted either
			}
		}
	}
}

// Tick closes the siblings whose probes went unanswered, and forgets
// peers long silent.
func (d *domainPolicy) Tick(now time.Time) {
	d.prune(now)
	if len(d.probes) == 0 {
		return
	}
	var late []*peerHealth
	for _, id := range d.probes {
		if ph := d.peers[id]; ph != nil && !now.Before(ph.probeBy) {
			late = append(late, ph)
		}
	}
	sort.Slice(late, func(i, j int) bool { return late[i].peer.ID < late[j].peer.ID })
	for _, ph := range late {
		if !ph.heardAt.IsZero() && now.Sub(ph.heardAt) < d.opt.SilenceWindow {
			// Not silent: its data path delivered within the window, and
			// only the answer is late (it queues behind that rank's own
			// backlog). Slow is not dead: the check is renewed.
			d.renew(ph)
			continue
		}
		round := ph.probeRound
		d.endProbe(ph)
		d.stats.ProbesFailed++
		if round {
			// A sibling of the faulted rank is dead too: the domain stays
			// suspect, and new sessions into it prove their data path.
			dh := d.domains[ph.domain]
			dh.failed = true
			dh.suspectUntil = now.Add(d.opt.SuspectHold)
		}
		if ph.halfOpen {
			ph.halfOpen = false
			ph.ejectedUntil = now.Add(d.ejectionFor(ph.ejections))
			ph.ejections++
			d.stats.Ejections++
		}
		d.out = append(d.out, Decision{Kind: DecideClose, Peer: ph.peer.ID, Cause: CauseProgressStall})
	}
}

// DataSeen is evidence of life (Witness): p's data path delivered bytes or
// a frame. It matters only while a check of p runs: the check's probe is
// not answered by it (the bytes may have left before the fault), but a
// rank heard from since the check began is judged as a load's watchdog
// judges a data path, dead only after SilenceWindow (the stall timeout)
// without a delivery: at the deadline its check is renewed instead, and
// its requests are not held meanwhile (Gate). It
// reports whether a check of p runs, so that the caller may stop telling.
func (d *domainPolicy) DataSeen(now time.Time, p Peer) bool {
	ph := d.peers[p.ID]
	if ph == nil || ph.probeSeq == 0 {
		return false
	}
	ph.heardAt = later(ph.heardAt, now)
	return true
}

// renew sends a running check's next probe, due SilenceWindow after the
// rank's last delivery: it delivered within the window, so it is alive,
// but its answer has not come. An answer to any of the check's probes
// ends the check; silence for the window closes it.
func (d *domainPolicy) renew(ph *peerHealth) {
	delete(d.probes, ph.probeSeq)
	d.seq++
	ph.probeSeq = d.seq
	d.probes[d.seq] = ph.peer.ID
	ph.probeBy = ph.heardAt.Add(d.opt.SilenceWindow)
	d.stats.ProbesRenewed++
	d.out = append(d.out, Decision{Kind: DecideProbe, Peer: ph.peer.ID, Seq: d.seq})
}

// NextDeadline: decisions not taken yet are due at once; then the earliest
// outstanding probe's deadline and the next prune (Tick's two timers).
func (d *domainPolicy) NextDeadline() (time.Time, bool) {
	if len(d.out) > 0 {
		return time.Time{}, true
	}
	at := d.pruned.Add(pruneEvery)
	if len(d.probes) == 0 {
		return at, true // ranging over an empty map still costs an iterator
	}
	for _, id := range d.probes {
		if ph := d.peers[id]; ph != nil && ph.probeBy.Before(at) {
			at = ph.probeBy
		}
	}
	return at, true
}

func (d *domainPolicy) TakeDecisions() []Decision {
	o := d.out
	d.out = nil
	return o
}

// pruneEvery is how often prune scans the peers.
const pruneEvery = time.Minute

// forgetAfter is how long a peer with nothing pending (no session, no
// probe, no ejection) is remembered: its fault count and must-probe mark
// outlive a flap by far, and then state no longer grows with every peer
// id ever seen (a fleet's churn, or ids a peer made up).
func (d *domainPolicy) forgetAfter() time.Duration { return max(10*time.Minute, 2*d.opt.EjectionCap) }

// prune forgets the peers, and the domains left empty, that nothing
// refers to any more: the ejection cap then counts the domains seen
// lately, not every one ever named.
func (d *domainPolicy) prune(now time.Time) {
	if now.Sub(d.pruned) < pruneEvery {
		return
	}
	d.pruned = now
	for id, ph := range d.peers {
		if !ph.forgettable() || now.Sub(ph.lastSeen) < d.forgetAfter() {
			continue
		}
		d.forget(id, ph)
	}
}
