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
//     at most MaxInflight per session. Every tick visits each round, so
//     this also bounds the tick's work per session.
//   - Parked lookups (waiting for keys being filled): at most MaxInflight.
//   - Lookup keys per second: a token bucket (LookupKeysPerSecond, burst
//     one second's worth), so that lookups cannot keep the loop busy.
//   - Fetches in flight: at most MaxInflight, the value our Hello
//     advertised; the consumer side keeps under the peer's (RequestBlocks).
//   - A lookup pin no fetch claims is released after LookupPinTimeout, and
//     a fetch that nothing backs (no store job, no supply) fails after
//     unbackedFetchTimeout rather than live as long as the session.

// SourceQuota is what the sessions of one source (a host; the table
// decides) share: the rounds their peers' lookups and fetches opened, and
// how many of them hold any. A lookup that would open a round while its
// source holds MaxInflight is refused (MISS) if its session holds its
// part already, MaxInflight/k for k sessions of the source with rounds
// counting itself: a lone session keeps its whole cap, many sessions of
// one host share one cap once the older ones' rounds end (a lookup pin
// timeout at most), and a session of the host with few rounds is never
// refused for the others'. Fetches are never refused by it: our Hello
// promised each session MaxInflight. The sessions sharing one run in one
// goroutine.
type SourceQuota struct {
	rounds   int // rounds its sessions' peers opened, not finalized
	sessions int // its sessions holding any
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
	q := s.srcQuota()
	if q == nil {
		return
	}
	q.rounds += d
	switch {
	case before == 0 && sv.quota.peerRounds > 0:
		q.sessions++
	case before > 0 && sv.quota.peerRounds == 0:
		q.sessions--
	}
}

// overSource reports whether a new lookup round would pass the source's
// cap while this session holds its part of it (SourceQuota).
func (sv *server) overSource(s *Session) bool {
	q := s.srcQuota()
	if q == nil || q.rounds < s.maxInflight() {
		return false
	}
	k := q.sessions
	if sv.quota.peerRounds == 0 {
		k++
	}
	return sv.quota.peerRounds >= max(1, s.maxInflight()/k)
}

// DefaultLookupKeysPerSecond is LookupKeysPerSecond's default.
const DefaultLookupKeysPerSecond = 1 << 20

// quota is the producer side's per-session accounting.
type quota struct {
	peerRounds int       // rounds a peer's lookup or fetch opened, not finalized
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
	why := ""
	switch {
	case sv.roundOf(m.ReqID, m.Round) == nil && q.peerRounds >= s.maxInflight():
		why = "open rounds"
	case sv.roundOf(m.ReqID, m.Round) == nil && sv.overSource(s):
		why = "open rounds of its source"
	case len(sv.parked) >= s.maxInflight():
		why = "parked lookups"
	case float64(len(m.Keys)) > q.tokens:
		why = "lookup keys per second"
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
