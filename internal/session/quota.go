package session

import (
	"time"

	"github.com/kvp2p/kvp2p/internal/wire"
)

// Quotas on what one peer can make the producer side hold or do. A peer
// within its own advertised and our advertised limits never meets them;
// a hostile or broken one gets a clear refusal (an all-MISS answer for a
// lookup, a protocol error for a fetch over our MaxInflight) instead of
// unbounded memory, pins or per-tick work.
//
//   - Rounds a peer opened (by lookup or fetch) and that are not settled:
//     at most MaxInflight per session, and per source in two levels
//     (SourceQuota). Every tick visits each round, so this also bounds
//     the tick's work per session.
//   - Parked lookups (waiting for keys being filled): at most MaxInflight
//     per session, and per source in two levels (SourceQuota).
//   - Lookup keys per second: a token bucket (LookupKeysPerSecond, burst
//     one second's worth), so that lookups cannot keep the loop busy; per
//     source in two levels (SourceQuota).
//   - Fetches in flight: at most MaxInflight, the value our Hello
//     advertised; the consumer side keeps under the peer's (RequestBlocks).
//   - A lookup pin no fetch claims is released after LookupPinTimeout, and
//     a fetch that nothing backs (no store job, no supply) fails after
//     unbackedFetchTimeout rather than live as long as the session.

// SourceQuota is what the sessions of one source (a host; the table
// decides) share, each count in two levels (sourceShare): the rounds
// their peers' lookups and fetches opened, and the lookups parked
// waiting for keys being filled. A lookup that would open a round while
// its source holds MaxInflight rounds, or that comes while the source has
// MaxInflight lookups parked, is refused (MISS) if its session holds its
// part already, MaxInflight/k for k sessions of the source holding any,
// counting itself: a lone session keeps its whole cap, many sessions of
// one host share one cap once the older ones' rounds end (a lookup pin
// timeout at most) or their parked lookups are answered
// (LookupPendingTimeout at most), and a session of the host with few is
// never refused for the others'. Fetches are never refused by it: our
// Hello promised each session MaxInflight. The sessions sharing one run
// in one goroutine.
//
// Lookup keys per second are shared in two levels too (keyShare): a
// lookup its session's bucket allows is served if the source's bucket
// (LookupKeysPerSecond, shared) has the keys, or else if its session used
// less than its part of the rate in the last second, the rate over the
// source's sessions that looked up. Those under their part may take the
// source's bucket below zero, together at most one rate a second, so a
// source's sessions get at most twice LookupKeysPerSecond (plus a burst),
// however many they are.
type SourceQuota struct {
	rounds sourceShare // rounds its sessions' peers opened, not finalized
	parked sourceShare // lookups its sessions parked
	keys   keyShare
}

// keyShare is a source's bucket of lookup keys.
type keyShare struct {
	tokens   float64
	refilled time.Time
	sessions int // its sessions that looked up, not ended
}

// take reports whether n keys of a lookup that its session's bucket
// allows may be served, and takes them from the source's bucket. used is
// what the session took in the last second, about (its bucket's deficit).
func (ks *keyShare) take(now time.Time, rate, used float64, n int) bool {
	if ks.refilled.IsZero() {
		ks.tokens = rate
	} else if dt := now.Sub(ks.refilled).Seconds(); dt > 0 {
		ks.tokens = min(rate, ks.tokens+dt*rate)
	}
	ks.refilled = now
	if float64(n) > ks.tokens && used+float64(n) > rate/float64(max(1, ks.sessions)) {
		return false
	}
	ks.tokens -= float64(n)
	return true
}

// sourceShare is one count the sessions of a source share: its total,
// and how many sessions hold any.
type sourceShare struct {
	n        int
	sessions int
}

// add counts d more (or, negative, fewer) for a session that held before.
func (sh *sourceShare) add(before, d int) {
	sh.n += d
	switch after := before + d; {
	case before == 0 && after > 0:
		sh.sessions++
	case before > 0 && after == 0:
		sh.sessions--
	}
}

// over reports whether a session holding mine may take no more: the
// source holds limit, and the session its part of it.
func (sh *sourceShare) over(mine, limit int) bool {
	if sh.n < limit {
		return false
	}
	k := sh.sessions
	if mine == 0 {
		k++
	}
	return mine >= max(1, limit/k)
}

// SourceBlocks is a Blocks whose session shares a SourceQuota with the
// other sessions of its source; it must return the same one each time.
type SourceBlocks interface {
	Blocks
	SourceQuota() *SourceQuota
}

func (s *Session) srcQuota() *SourceQuota {
	if sb, ok := s.blocks.(SourceBlocks); ok {
		return sb.SourceQuota()
	}
	return nil
}

// addRounds counts d rounds opened (or, negative, ended) by the peer, in
// the session's quota and its source's.
func (sv *server) addRounds(s *Session, d int) {
	before := sv.quota.peerRounds
	sv.quota.peerRounds += d
	if q := s.srcQuota(); q != nil {
		q.rounds.add(before, d)
	}
}

// countParked brings the source's count of parked lookups up to date
// with the session's, after sv.parked changed.
func (sv *server) countParked(s *Session) {
	before := sv.quota.parked
	sv.quota.parked = len(sv.parked)
	if q := s.srcQuota(); q != nil {
		q.parked.add(before, sv.quota.parked-before)
	}
}

// overSource names the source's cap a new lookup would pass while this
// session holds its part of it (SourceQuota), or returns "".
func (sv *server) overSource(s *Session, opens bool) string {
	q := s.srcQuota()
	switch {
	case q == nil:
		return ""
	case opens && q.rounds.over(sv.quota.peerRounds, s.maxInflight()):
		return "open rounds of its source"
	case q.parked.over(sv.quota.parked, s.maxInflight()):
		return "parked lookups of its source"
	}
	return ""
}

// DefaultLookupKeysPerSecond is LookupKeysPerSecond's default.
const DefaultLookupKeysPerSecond = 1 << 20

// quota is the producer side's per-session accounting.
type quota struct {
	peerRounds int       // rounds a peer's lookup or fetch opened, not finalized
	parked     int       // len(server.parked), as its source counts it
	keyed      bool      // counted in its source's keyShare.sessions
	tokens     float64   // lookup keys that may be served now
	refilled   time.Time // tokens were last refilled at this time
	refused    uint64    // lookups refused; logged with the first and every 1024th
}

func (s *Session) maxInflight() int {
	if s.cfg.MaxInflight == 0 {
		return 1024
	}
	return int(s.cfg.MaxInflight)
}

func (s *Session) keysPerSecond() float64 {
	if s.cfg.LookupKeysPerSecond > 0 {
		return float64(s.cfg.LookupKeysPerSecond)
	}
	return DefaultLookupKeysPerSecond
}

// admitLookup reports whether m may be served: it opens a round within the
// cap, and its keys fit the rate budget. A refused lookup is answered MISS.
func (sv *server) admitLookup(s *Session, now time.Time, m *wire.Lookup) bool {
	q := &sv.quota
	rate := s.keysPerSecond()
	if q.refilled.IsZero() {
		q.tokens = rate
	} else if dt := now.Sub(q.refilled).Seconds(); dt > 0 {
		q.tokens = min(rate, q.tokens+dt*rate)
	}
	q.refilled = now
	opens := sv.roundOf(m.ReqID, m.Round) == nil
	why := sv.overSource(s, opens)
	switch {
	case opens && q.peerRounds >= s.maxInflight():
		why = "open rounds"
	case len(sv.parked) >= s.maxInflight():
		why = "parked lookups"
	case why != "": // over its part of its source's cap
	case float64(len(m.Keys)) > q.tokens:
		why = "lookup keys per second"
	case !sv.takeSourceKeys(s, now, rate, len(m.Keys)):
		why = "lookup keys per second of its source"
	default:
		q.tokens -= float64(len(m.Keys))
		return true
	}
	if q.refused%1024 == 0 {
		s.logger().Warn("peer over its lookup quota: answering MISS", "quota", why, "refused", q.refused+1)
	}
	q.refused++
	s.send(now, &wire.LookupResp{ReqID: m.ReqID, Round: m.Round, Keys: m.Keys, Hits: make([]bool, len(m.Keys))})
	return false
}

// takeSourceKeys takes n keys from the session's source's bucket, if it
// has one (SourceQuota).
func (sv *server) takeSourceKeys(s *Session, now time.Time, rate float64, n int) bool {
	src := s.srcQuota()
	if src == nil {
		return true
	}
	if !sv.quota.keyed {
		sv.quota.keyed = true
		src.keys.sessions++
	}
	return src.keys.take(now, rate, rate-sv.quota.tokens, n)
}

// leaveSourceKeys stops counting the ended session among its source's.
func (sv *server) leaveSourceKeys(s *Session) {
	if sv.quota.keyed {
		sv.quota.keyed = false
		s.srcQuota().keys.sessions--
	}
}

// roundOf returns an existing round, or nil; it never creates one.
func (sv *server) roundOf(id string, num uint64) *round {
	if r := sv.reqs[id]; r != nil {
		return r.rounds[num]
	}
	return nil
}

// lookupPinTimeout bounds how long a lookup's pins wait for the fetch:
// the symmetric load timeout, since a load slower than that fails anyway.
func (s *Session) lookupPinTimeout() time.Duration {
	if s.cfg.LookupPinTimeout > 0 {
		return s.cfg.LookupPinTimeout
	}
	if s.cfg.LoadTimeoutSymmetric > 0 {
		return s.cfg.LoadTimeoutSymmetric
	}
	return s.cfg.StoreTimeout
}

// unbackedFetchTimeout bounds a fetch no store job or lookup backs: twice
// the longer of the store and PD load timeouts, so that a consumer with
// our timers gave up long before (a decoder-first PD fetch legitimately
// waits for its prefiller's store).
func (s *Session) unbackedFetchTimeout() time.Duration {
	return 2 * max(s.cfg.StoreTimeout, s.cfg.LoadTimeoutPD)
}
