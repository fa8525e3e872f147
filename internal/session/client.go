package session

import (
	"bytes"
	"fmt"
	"slices"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/store"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// The consumer role: lookups, loads, aborts, and the timers that end them.

type probeState uint8

const (
	probeUnsent probeState = iota
	probeSent
	probeHit
	probeMiss
	// probeCarried: a confirmed hit of an earlier round that the fetch of
	// that round left behind, re-pinned by a lookup sent in this round
	// before that fetch (see carry). Loadable at once, as a hit: the
	// producer reads the control stream in order, so it pinned the key
	// again before it unpinned the old round's pin. The lookup's answer
	// turns it into probeHit or, if the key left the producer's store
	// meanwhile, probeMiss.
	probeCarried
	// probeFetched marks, inside RequestBlocks only, the keys of the fetch
	// being sent (leftBehind); the request's probes are cleared right after.
	probeFetched
)

// clientReq is one request id's consumer state on this session.
type clientReq struct {
	probes     map[wire.Key]probeState
	unsent     []wire.Key
	round      uint64 // current symmetric round; never reused on this session
	lookupOpen bool   // a Lookup was sent since the last Fetch
}

// load is one job. It lives until it has a result and, if it failed, until
// its destination slots are proven quiet.
type load struct {
	job       uint64
	req       string
	round     uint64
	pd        bool
	slots     []store.Slot
	expected  uint64
	submitted time.Time
	lastData  time.Time
	bytes     uint64
	queuedAt  time.Time // first Progress{Queued}: the producer has the blocks, not its turn yet
	// The observed rate's anchors (slow.go): from is one to two
	// SlowWindows back, mark the newer one; slow is its last judgment.
	from, mark rateMark
	slow       bool

	ctlOK        bool      // producer said TransferDone(success)
	producerDone bool      // TransferDone or AbortAck received: the producer stopped
	dataEnded    bool      // the terminal data frame was seen: the reader stopped
	dataOK       bool      // ... and it was a complete, verified Done
	reported     bool      // the LoadResult was published
	failedAt     time.Time // when it was reported failed: its slots must be proven quiet within AbortAckTimeout
	abortSent    bool
	abortAt      time.Time
}

type client struct {
	loads map[uint64]*load // by job
	// Lookup deadline: measures peer silence, not the lookup phase (vLLM
	// #56836). waitSince restarts whenever a LookupResp arrives. Lookups are
	// counted per request and round, so that one the consumer abandoned
	// (it fetched, or the request finished: the producer drops it
	// unanswered) neither holds the deadline armed nor eats the answer of
	// a later one.
	outstanding map[lookupID]outLookup
	waitSince   time.Time
	// pendingIgnored counts LookupPending for no outstanding lookup (one
	// abandoned or answered meanwhile, or with LookupTimeout off).
	pendingIgnored uint64
	reqs           map[string]*clientReq
	nextRound      uint64 // symmetric rounds start at 1; PD is always round 0
	// dataAt is when the data connection last delivered anything for any
	// load (bytes, Progress, a terminal frame). A load's progress watchdog
	// reads the later of its own last data and this: a load queued behind
	// the session's other loads on a slow link is not stalled while the
	// link delivers (issue 24: slow is not dead); its start budget and
	// load timeout still bound it.
	dataAt time.Time
	// nSlow counts the running loads judged slow; slowAt is the last slow
	// judgment (slow.go).
	nSlow  int
	slowAt time.Time
}

// silentSince is when load l's data path last showed life: its own data,
// or any on the session's data connection.
func (c *client) silentSince(l *load) time.Time { return later(l.lastData, c.dataAt) }

type lookupID struct {
	req   string
	round uint64
}

// abandon forgets the outstanding lookups of req for rounds other than
// keep (all of them when keep is 0, as no lookup uses round 0).
func (c *client) abandon(req string, keep uint64) {
	for id := range c.outstanding {
		if id.req == req && id.round != keep {
			delete(c.outstanding, id)
		}
	}
	dropEmpty(&c.outstanding)
}

// outLookup is one request and round's outstanding lookups.
type outLookup struct {
	n    int       // sent and not answered
	at   time.Time // when the first of them was sent
	held bool      // the peer said it still works on them (LookupPending)
}

func (c *client) init() {
	c.reqs = map[string]*clientReq{}
	c.nextRound = 1
}

// The in-flight maps (client.loads and outstanding, server.byJob, stores
// and reqs) are nil while empty: made by put, dropped by dropEmpty. Asking
// whether a session is busy, or when its next timer is, then reads no map
// header: a cache miss per heartbeat otherwise, in a fleet of idle
// sessions. Any of them may also be empty and not nil.

// put sets (*m)[k] = v, making the map first if it is nil.
func put[K comparable, V any](m *map[K]V, k K, v V) {
	if *m == nil {
		*m = map[K]V{}
	}
	(*m)[k] = v
}

// dropEmpty drops an empty map: nil reads as empty.
func dropEmpty[K comparable, V any](m *map[K]V) {
	if len(*m) == 0 {
		*m = nil
	}
}

func (c *client) busy() bool { return len(c.loads) > 0 || len(c.outstanding) > 0 }

func (c *client) req(id string) *clientReq {
	r := c.reqs[id]
	if r == nil {
		r = &clientReq{probes: map[wire.Key]probeState{}, round: c.nextRound}
		c.nextRound++
		c.reqs[id] = r
	}
	return r
}

// RegisterLookup registers interest in key for request id and returns what
// is known of it. Idempotent; a resolved value is kept until the next fetch.
func (s *Session) RegisterLookup(id string, k wire.Key) Verdict {
	if s.phase >= ended {
		return Miss
	}
	return s.client.req(id).register(k)
}

// RegisterLookups is RegisterLookup for each of keys in turn, key i's
// verdict in out[i] (len(out) >= len(keys)): one request, looked up once
// for a step's batch.
func (s *Session) RegisterLookups(id string, keys []wire.Key, out []Verdict) {
	if len(keys) == 0 {
		return // as no call: the request is not created
	}
	if s.phase >= ended {
		for i := range keys {
			out[i] = Miss
		}
		return
	}
	r := s.client.req(id)
	for i, k := range keys {
		out[i] = r.register(k)
	}
}

func (r *clientReq) register(k wire.Key) Verdict {
	st, ok := r.probes[k]
	if !ok {
		r.probes[k] = probeUnsent
		r.unsent = append(r.unsent, k)
		return Retry
	}
	switch st {
	case probeHit, probeCarried:
		return Hit
	case probeMiss:
		return Miss
	}
	return Retry
}

// FlushLookups sends one Lookup per request id carrying the keys first
// registered since the last flush. Nothing is sent before the handshake
// completes: the keys wait (the caller decides how long a lookup may RETRY).
func (s *Session) FlushLookups(now time.Time) { s.client.flush(s, now) }

func (c *client) flush(s *Session, now time.Time) {
	if s.phase != ready {
		return
	}
	for id, r := range c.reqs {
		if len(r.unsent) == 0 {
			continue
		}
		keys := r.unsent
		r.unsent = nil
		for _, k := range keys {
			r.probes[k] = probeSent
		}
		c.sendLookup(s, now, id, r, keys)
	}
}

// sendLookup sends one lookup of the request's current round and counts it
// outstanding (the wait for answers starts with the first).
func (c *client) sendLookup(s *Session, now time.Time, id string, r *clientReq, keys []wire.Key) {
	r.lookupOpen = true
	if len(c.outstanding) == 0 {
		c.waitSince = now
	}
	lid := lookupID{id, r.round}
	o, ok := c.outstanding[lid]
	if !ok {
		o.at = now
	}
	o.n++
	put(&c.outstanding, lid, o)
	s.send(now, &wire.Lookup{ReqID: id, Round: r.round, Keys: keys})
}

func (c *client) onLookupResp(s *Session, now time.Time, m *wire.LookupResp) error {
	if len(m.Hits) != len(m.Keys) {
		return fmt.Errorf("lookup-resp with %d keys and %d hits", len(m.Keys), len(m.Hits))
	}
	c.waitSince = now // the peer is answering: re-arm
	if id := (lookupID{m.ReqID, m.Round}); c.outstanding[id].n > 0 {
		o := c.outstanding[id]
		if o.n--; o.n == 0 {
			delete(c.outstanding, id)
			dropEmpty(&c.outstanding)
		} else {
			c.outstanding[id] = o
		}
	}
	r := c.reqs[m.ReqID]
	if r == nil || r.round != m.Round {
		return nil // a finished request or an older round: stale, ignore
	}
	misses := 0
	for i, k := range m.Keys {
		if st := r.probes[k]; st != probeSent && st != probeCarried {
			continue // unknown, or resolved already (by the deadline)
		}
		if m.Hits[i] {
			r.probes[k] = probeHit
		} else {
			r.probes[k] = probeMiss
			misses++
		}
	}
	if misses > 0 {
		// Why a request's lookup missed is the producer's to say (its
		// log); this side records that it did.
		s.logger().Debug("peer answered MISS", "req", m.ReqID, "round", m.Round, "misses", misses, "keys", len(m.Keys))
	}
	return nil
}

// RequestBlocks starts a load: job fetches keys into the reserved
// destination slots. PD loads use round 0; symmetric loads use the
// request's current round and must only name confirmed hits.
func (s *Session) RequestBlocks(now time.Time, job uint64, id string, keys []wire.Key, slots []store.Slot, pd bool) error {
	if s.phase != ready {
		return fmt.Errorf("session to %s not ready: a load is never queued behind a handshake", s.peer)
	}
	if len(keys) == 0 || len(keys) != len(slots) {
		return fmt.Errorf("load of %d keys into %d slots", len(keys), len(slots))
	}
	if _, dup := s.client.loads[job]; dup {
		return fmt.Errorf("job %d already in flight", job)
	}
	if m := s.peerHello.MaxInflight; m > 0 && uint64(len(s.client.loads)) >= uint64(m) {
		// The peer would refuse the fetch as a protocol error and end the
		// session: this load falls back instead.
		return fmt.Errorf("peer's max_inflight %d reached", m)
	}
	if pd {
		// PD has one round (0) per request: a second fetch while the first
		// is still known to the producer is a protocol error there, which
		// would end the session and everything else it carries.
		for _, l := range s.client.loads {
			if l.pd && l.req == id {
				return fmt.Errorf("PD load of %s already in flight (job %d)", id, l.job)
			}
		}
	}
	r := s.client.reqs[id]
	if r == nil {
		if !pd {
			// Nothing was looked up (or the request ended): refused without
			// leaving a request behind.
			return fmt.Errorf("symmetric load of key %x that is not a confirmed hit", keys[0][:4])
		}
		r = s.client.req(id)
	}
	round := uint64(0)
	var left []wire.Key
	if !pd {
		for _, k := range keys {
			if st := r.probes[k]; st != probeHit && st != probeCarried {
				return fmt.Errorf("symmetric load of key %x that is not a confirmed hit", k[:4])
			}
		}
		left = r.leftBehind(keys)
		round = r.round
		r.round = s.client.nextRound
		s.client.nextRound++
		s.client.abandon(id, 0) // the producer drops this round's unanswered lookups
	}
	r.lookupOpen = false
	clear(r.probes) // the producer unpins what this round's fetch does not name
	r.unsent = nil
	if len(left) > 0 {
		// Before the fetch: its pins must be taken before the fetch drops
		// the old round's.
		s.client.carry(s, now, id, r, left)
	}
	l := &load{
		job: job, req: id, round: round, pd: pd, slots: slots,
		expected:  uint64(len(keys)) * uint64(s.cfg.BlockBytes),
		submitted: now, lastData: now,
	}
	put(&s.client.loads, job, l)
	wslots := make([]uint32, len(slots))
	for i, sl := range slots {
		wslots[i] = uint32(sl)
	}
	s.data(DataOp{Kind: OpExpect, Job: job, Slots: slots})
	s.send(now, &wire.Fetch{ReqID: id, Round: round, Job: job, Keys: keys, Slots: wslots})
	return nil
}

// leftBehind lists, in a fixed order, the request's confirmed hits (and
// carried keys) that a fetch of keys does not name. It marks keys in
// r.probes: the caller clears them next.
//
// vLLM may load a request's hits as several jobs: in one step (the lookups
// of a pass saw some hits and some RETRYs) or in later steps. A symmetric
// round allows one fetch, and the producer unpins what that fetch leaves
// (server.onFetch), so the hits it leaves must move to the next round
// without a gap in which the producer could evict them: carry.
func (r *clientReq) leftBehind(keys []wire.Key) []wire.Key {
	for _, k := range keys {
		r.probes[k] = probeFetched
	}
	var left []wire.Key // nil in the usual case: the fetch names every hit
	for k, st := range r.probes {
		if st == probeHit || st == probeCarried {
			left = append(left, k)
		}
	}
	slices.SortFunc(left, func(a, b wire.Key) int { return bytes.Compare(a[:], b[:]) })
	return left
}

// carry re-pins left in the request's new round with a lookup sent ahead of
// the old round's fetch; the keys stay loadable meanwhile (probeCarried).
// The pins end as any lookup's: claimed by a later fetch, released by the
// request's terminal empty fetch (lookupOpen), or by the producer's
// LookupPinTimeout if neither comes. A producer that refuses the lookup
// (its quota) answers MISS: a load of those keys then fails cleanly (the
// fetch finds no supply) and the request falls back.
func (c *client) carry(s *Session, now time.Time, id string, r *clientReq, left []wire.Key) {
	for _, k := range left {
		r.probes[k] = probeCarried
	}
	c.sendLookup(s, now, id, r, left)
}

// finish is the consumer side of a request's end: abort what is in flight
// (the results are published now, the slots wait), and end an open lookup
// with the terminal empty fetch.
func (c *client) finish(s *Session, now time.Time, id string) {
	for _, l := range c.loads {
		if l.req == id && !l.reported {
			c.fail(s, now, l, "request finished")
			c.abort(s, now, l)
		}
	}
	if r := c.reqs[id]; r != nil {
		if r.lookupOpen {
			s.send(now, &wire.Fetch{ReqID: id, Round: r.round})
		}
		delete(c.reqs, id)
	}
	c.abandon(id, 0)
}

func (c *client) fail(s *Session, now time.Time, l *load, why string) {
	if l.reported {
		return
	}
	l.reported = true
	l.failedAt = now
	c.setSlow(l, false, now)
	s.out.Loads = append(s.out.Loads, LoadResult{Job: l.job, ReqID: l.req, Bytes: l.bytes, Reason: why})
	// A load's failure says nothing about the request's open lookup: a later
	// round's pins still wait for a fetch or the terminal empty fetch.
}

func (c *client) abort(s *Session, now time.Time, l *load) {
	if l.abortSent || l.producerDone {
		c.maybeRelease(s, l)
		return
	}
	l.abortSent = true
	l.abortAt = now
	s.send(now, &wire.Abort{ReqID: l.req, Round: l.round, Job: l.job})
}

// maybeRelease frees a failed load's slots once both writers are proven
// stopped: the producer (TransferDone or AbortAck) and our reader (the
// terminal data frame).
func (c *client) maybeRelease(s *Session, l *load) {
	if l.reported && !l.ctlOKAndData() && l.producerDone && l.dataEnded {
		delete(c.loads, l.job)
		dropEmpty(&c.loads)
		s.out.Releases = append(s.out.Releases, l.job)
	}
}

func (l *load) ctlOKAndData() bool { return l.ctlOK && l.dataOK }

// maybeSucceed publishes success when the producer and the data path agree.
func (c *client) maybeSucceed(s *Session, l *load) {
	if l.reported || !l.ctlOK || !l.dataOK {
		return
	}
	l.reported = true
	c.setSlow(l, false, time.Time{})
	delete(c.loads, l.job)
	dropEmpty(&c.loads)
	s.out.Loads = append(s.out.Loads, LoadResult{Job: l.job, ReqID: l.req, OK: true, Bytes: l.bytes})
}

func (c *client) find(job uint64, id string, round uint64) *load {
	l := c.loads[job]
	if l == nil || l.req != id || l.round != round {
		return nil
	}
	return l
}

func (c *client) onTransferDone(s *Session, now time.Time, m *wire.TransferDone) {
	l := c.find(m.Job, m.ReqID, m.Round)
	if l == nil {
		s.logger().Debug("transfer-done for unknown load (duplicate or race)", "req", m.ReqID, "round", m.Round, "job_id", m.Job)
		return
	}
	l.producerDone = true
	if m.Success && !l.reported {
		l.ctlOK = true
		c.maybeSucceed(s, l)
		return
	}
	if !m.Success {
		c.fail(s, now, l, "producer failed the transfer")
	}
	c.maybeRelease(s, l)
}

func (c *client) onAbortAck(s *Session, now time.Time, m *wire.AbortAck) {
	l := c.find(m.Job, m.ReqID, m.Round)
	if l == nil {
		s.logger().Debug("abort-ack for unknown load (duplicate or race)", "req", m.ReqID, "round", m.Round, "job_id", m.Job)
		return
	}
	l.producerDone = true
	c.fail(s, now, l, "aborted")
	c.maybeRelease(s, l)
}

// ReasonStartBudget is the Reason of a load failed by LoadStartBudget.
const ReasonStartBudget = "not started within load_start_budget"

func (c *client) loadTimeout(s *Session, l *load) time.Duration {
	if l.pd {
		return s.cfg.LoadTimeoutPD
	}
	return s.cfg.LoadTimeoutSymmetric
}

func (c *client) tick(s *Session, now time.Time) {
	if s.phase != ready {
		return
	}
	if len(c.outstanding) > 0 && s.cfg.LookupTimeout > 0 && now.Sub(c.waitSince) >= s.cfg.LookupTimeout {
		s.logger().Warn("lookup timed out: peer silent", "silent_for", now.Sub(c.waitSince), "lookups", len(c.outstanding))
		for _, r := range c.reqs {
			r.missSent()
		}
		c.outstanding = nil
	}
	if len(c.outstanding) > 0 && s.cfg.LookupTimeout > 0 {
		c.holdsExpired(s, now)
	}
	for _, l := range c.loads {
		switch {
		case !l.reported && now.Sub(l.submitted) >= c.loadTimeout(s, l):
			s.logger().Warn(fmt.Sprintf("load timed out peer=%s req=%s round=%d job_id=%d after=%.1fs bytes=%d, sending abort",
				s.peer, l.req, l.round, l.job, now.Sub(l.submitted).Seconds(), l.bytes),
				"req", l.req, "round", l.round, "job_id", l.job, "after", now.Sub(l.submitted), "bytes", l.bytes)
			c.fail(s, now, l, "load timed out")
			c.abort(s, now, l)
		case !l.reported && l.bytes == 0 && !l.dataEnded && !l.queuedAt.IsZero() && s.cfg.LoadStartBudget > 0 &&
			now.Sub(l.queuedAt) >= s.cfg.LoadStartBudget:
			s.logger().Info("load queued past its start budget, sending abort", "req", l.req, "round", l.round,
				"job_id", l.job, "queued_for", now.Sub(l.queuedAt))
			c.fail(s, now, l, ReasonStartBudget)
			c.abort(s, now, l)
		case !l.reported && !l.dataEnded && s.cfg.StallTimeout > 0 && now.Sub(c.silentSince(l)) >= s.stallWindow():
			s.logger().Warn("data path stalled", "req", l.req, "round", l.round, "job_id", l.job,
				"silent_for", now.Sub(c.silentSince(l)), "bytes", l.bytes, "path_quiet", s.pathQuiet)
			s.EndOnFault(now, health.CauseProgressStall)
			return
		case l.reported && now.Sub(l.failedAt) >= s.cfg.AbortAckTimeout && !c.draining(s, now, l):
			// A failed load whose writers are not both proven stopped: only
			// the end of the session (then DataClosed) can free its slots.
			if !l.producerDone {
				s.logger().Warn("abort-ack timed out", "req", l.req, "round", l.round, "job_id", l.job)
				s.EndOnFault(now, health.CauseProtocolError)
			} else {
				s.logger().Warn("data path never ended a failed load", "req", l.req, "round", l.round, "job_id", l.job)
				s.EndOnFault(now, health.CauseProgressStall)
			}
			return
		}
	}
}

// draining reports whether failed load l, whose producer has stopped
// (AbortAck or TransferDone) but whose terminal data frame has not come,
// is still draining: the data connection delivered within the watchdog's
// window (stallWindow).
// Its terminal frame waits behind bytes already in the producer's send
// buffer (a deliberately failed slow load's own, on a slow link): that is
// not a fault, and the session stays (issue 24: slow is not dead). The
// progress watchdog's silence bounds it, as it bounds a running load.
func (c *client) draining(s *Session, now time.Time, l *load) bool {
	return now.Before(c.drainsUntil(s, l))
}

// drainsUntil is when failed load l stops draining (draining): one
// stallWindow after the data connection last delivered; zero if l is
// not draining at all (its producer has not stopped, or its terminal
// frame came).
func (c *client) drainsUntil(s *Session, l *load) time.Time {
	if !l.producerDone || l.dataEnded || s.cfg.StallTimeout <= 0 || c.dataAt.IsZero() {
		return time.Time{}
	}
	return c.dataAt.Add(s.stallWindow())
}

// close fails every load at once. Their slots are released by dataClosed.
func (c *client) close(s *Session, now time.Time, cause health.Cause) {
	for _, l := range c.loads {
		if cause == health.CauseGoodbye && l.lingers() {
			// The producer said it sent everything before its orderly
			// goodbye: the bytes may still be in the data connection.
			// The load may finish from it until StopLinger.
			continue
		}
		c.fail(s, now, l, "peer down: "+cause.String())
	}
	for _, r := range c.reqs {
		for k, st := range r.probes {
			if st == probeSent || st == probeUnsent || st == probeCarried {
				r.probes[k] = probeMiss
			}
		}
	}
	c.outstanding = nil
}

// lingers: the producer reported the load sent, its data has not ended.
func (l *load) lingers() bool { return l.ctlOK && !l.dataEnded && !l.reported }

// Lingering reports whether an ended session still has loads that may
// finish from its data connection (see close); the owner keeps the data
// connection open for them, at most for a short time, then StopLinger.
func (s *Session) Lingering() bool {
	if s.phase < ended {
		return false
	}
	for _, l := range s.client.loads {
		if l.lingers() {
			return true
		}
	}
	return false
}

// StopLinger fails the loads still waiting for their data after the end.
func (s *Session) StopLinger(now time.Time) {
	for _, l := range s.client.loads {
		if l.lingers() {
			s.client.fail(s, now, l, "peer down: goodbye before its data arrived")
		}
	}
}

func (c *client) dataClosed(s *Session) {
	s.StopLinger(time.Time{}) // no data can come any more
	for job := range c.loads {
		s.out.Releases = append(s.out.Releases, job)
	}
	c.loads = nil
	c.nSlow = 0
}

// FailedRequests lists the request ids that had a load or an unresolved
// probe on this session; used by the reap to fill the failed set.
func (s *Session) FailedRequests() []string {
	seen := map[string]bool{}
	var ids []string
	for _, l := range s.client.loads {
		if l.lingers() {
			continue // it may still succeed
		}
		if !seen[l.req] {
			seen[l.req] = true
			ids = append(ids, l.req)
		}
	}
	for id, r := range s.client.reqs {
		if seen[id] {
			continue
		}
		for _, st := range r.probes {
			if st != probeHit {
				seen[id] = true
				ids = append(ids, id)
				break
			}
		}
	}
	return ids
}
