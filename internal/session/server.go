package session

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/kvp2p/kvp2p/internal/store"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// The producer role: supply (stored blocks and lookup pins) is matched with
// demand (a Fetch) per request and round; matched blocks go to the data
// path; a round ends with exactly one TransferDone unless the consumer
// ended the request itself.

type supply struct {
	slot   store.Slot
	lookup bool // pinned by a lookup on this session (we unpin it); else a store job's pin
}

type demand struct {
	job     uint64
	keys    []wire.Key
	index   map[wire.Key][]uint32 // key -> indexes in the fetch still unmatched
	pending int                   // blocks not yet handed to the data path
}

type round struct {
	req        string
	num        uint64
	created    time.Time
	fromLookup bool // supply came from lookups: symmetric semantics
	supply     map[wire.Key]supply
	storeJobs  []uint64
	lookupPins []store.Slot // every slot a lookup pinned for this round
	demand     *demand
	opened     bool // the data path knows the job
	sentLast   bool
	finishing  bool // the local request finished: no more supply will come
	aborting   bool
	abortAt    time.Time
	acked      bool // the abort was acked before the writer stopped (forced): never a success
	canceled   bool // OpCancel was issued for its job
	silent     bool // the consumer ended the request: no TransferDone
	byPeer     bool // a peer's lookup or fetch opened it: counted in quota.peerRounds
}

type serverReq struct {
	rounds     map[uint64]*round
	finishing  bool // the local (PD) request finished
	terminated bool // the consumer's terminal empty fetch arrived
	symmetric  bool // it has had lookup rounds (round > 0): nothing binds it
	seen       bool // a PD Fetch for it arrived on this session
}

// prune drops a request's state once no round is left and nothing more can
// come for it that needs the state: the producer or the consumer ended it,
// or it is symmetric (each round carries all it needs). Without this, every
// symmetric request would leave a zombie entry behind (#49820).
func (sv *server) prune(id string) {
	if r := sv.reqs[id]; r != nil && len(r.rounds) == 0 && (r.finishing || r.terminated || r.symmetric) {
		delete(sv.reqs, id)
		dropEmpty(&sv.reqs)
	}
}

type parkedLookup struct {
	msg  *wire.Lookup
	at   time.Time
	hits []bool
	wait []int // indexes still pending
}

type storeJob struct {
	at    time.Time
	round *round
}

type server struct {
	parked []*parkedLookup
	byJob  map[uint64]*round // consumer job id -> round with that demand
	stores map[uint64]*storeJob
	reqs   map[string]*serverReq
	// settled after DataClosed: pins the writer might still be reading
	deferredStores []StoreResult
	deferredPins   []store.Slot
	quota          quota
}

func (sv *server) busy() bool { return len(sv.byJob) > 0 || len(sv.stores) > 0 || len(sv.parked) > 0 }

func (sv *server) req(id string) *serverReq {
	r := sv.reqs[id]
	if r == nil {
		r = &serverReq{rounds: map[uint64]*round{}}
		put(&sv.reqs, id, r)
	}
	return r
}

func (sv *server) round(id string, num uint64, now time.Time) *round {
	r := sv.req(id)
	rd := r.rounds[num]
	if rd == nil {
		rd = &round{req: id, num: num, created: now, supply: map[wire.Key]supply{}, finishing: r.finishing}
		r.rounds[num] = rd
	}
	return rd
}

// peerRound is round for a peer's lookup or fetch: a new one counts
// against the peer's quota.
func (sv *server) peerRound(s *Session, id string, num uint64, now time.Time) *round {
	rd := sv.roundOf(id, num)
	if rd == nil {
		rd = sv.round(id, num, now)
		rd.byPeer = true
		sv.addRounds(s, 1)
	}
	return rd
}

// AddStoredBlocks adds a PD store job's pinned blocks as supply for request
// id (round 0). The caller pinned slots; a StoreResult for job tells it to
// unpin them.
func (s *Session) AddStoredBlocks(now time.Time, id string, keys []wire.Key, slots []store.Slot, job uint64) {
	if s.phase >= ended {
		s.out.Stores = append(s.out.Stores, StoreResult{Job: job})
		return
	}
	sv := &s.server
	rd := sv.round(id, 0, now)
	rd.storeJobs = append(rd.storeJobs, job)
	put(&sv.stores, job, &storeJob{at: now, round: rd})
	for i, k := range keys {
		if _, dup := rd.supply[k]; !dup {
			rd.supply[k] = supply{slot: slots[i]}
		}
	}
	sv.match(s, now, rd)
}

// match hands every block that has both supply and demand to the data path.
func (sv *server) match(s *Session, now time.Time, rd *round) {
	d := rd.demand
	if d == nil || rd.aborting || rd.sentLast {
		return
	}
	var blocks []Block
	for k, sp := range rd.supply {
		idxs := d.index[k]
		if len(idxs) == 0 {
			continue
		}
		for _, i := range idxs {
			blocks = append(blocks, Block{Index: i, Slot: sp.slot})
		}
		d.pending -= len(idxs)
		delete(d.index, k)
	}
	if len(blocks) == 0 && d.pending > 0 {
		return
	}
	// In the fetch's order, not the map's: a prefix's first blocks first,
	// and the consumer's reader guesses each next block where it goes
	// (datapath's guess) and reads ahead into it.
	slices.SortFunc(blocks, func(a, b Block) int { return cmp.Compare(a.Index, b.Index) })
	rd.sentLast = d.pending == 0
	s.data(DataOp{Kind: OpSend, Job: d.job, Blocks: blocks, Last: rd.sentLast})
}

func (sv *server) onLookup(s *Session, now time.Time, m *wire.Lookup) error {
	if m.Round == 0 {
		return fmt.Errorf("lookup for round 0 (reserved for PD)")
	}
	if !sv.admitLookup(s, now, m) {
		return nil
	}
	rd := sv.peerRound(s, m.ReqID, m.Round, now)
	if rd.demand != nil {
		return fmt.Errorf("lookup for round %d of %s after its fetch", m.Round, m.ReqID)
	}
	sv.reqs[m.ReqID].symmetric = true
	rd.fromLookup = true
	pl := &parkedLookup{msg: m, at: now, hits: make([]bool, len(m.Keys))}
	for i, k := range m.Keys {
		if _, ok := rd.supply[k]; ok {
			pl.hits[i] = true
			continue
		}
		if slot, ok := s.blocks.PinKey(k); ok {
			rd.supply[k] = supply{slot: slot, lookup: true}
			rd.lookupPins = append(rd.lookupPins, slot)
			pl.hits[i] = true
			continue
		}
		if s.blocks.Pending(k) {
			pl.wait = append(pl.wait, i)
		}
	}
	if len(pl.wait) > 0 {
		sv.parked = append(sv.parked, pl)
		return nil
	}
	s.send(now, &wire.LookupResp{ReqID: m.ReqID, Round: m.Round, Keys: m.Keys, Hits: pl.hits})
	return nil
}

// retryParked re-checks lookups waiting for keys being filled; a key still
// pending after LookupPendingTimeout is a miss.
func (sv *server) retryParked(s *Session, now time.Time) {
	kept := sv.parked[:0]
	for _, pl := range sv.parked {
		r := sv.reqs[pl.msg.ReqID]
		rd := (*round)(nil)
		if r != nil {
			rd = r.rounds[pl.msg.Round]
		}
		if rd == nil || rd.demand != nil {
			continue // the request ended or moved on: drop the lookup
		}
		expired := now.Sub(pl.at) >= s.cfg.LookupPendingTimeout
		wait := pl.wait[:0]
		for _, i := range pl.wait {
			k := pl.msg.Keys[i]
			if slot, ok := s.blocks.PinKey(k); ok {
				if _, dup := rd.supply[k]; dup {
					_ = s.blocks.Unpin(slot)
				} else {
					rd.supply[k] = supply{slot: slot, lookup: true}
					rd.lookupPins = append(rd.lookupPins, slot)
				}
				pl.hits[i] = true
				continue
			}
			if !expired && s.blocks.Pending(k) {
				wait = append(wait, i)
			}
		}
		pl.wait = wait
		if len(wait) > 0 {
			kept = append(kept, pl)
			continue
		}
		s.send(now, &wire.LookupResp{ReqID: pl.msg.ReqID, Round: pl.msg.Round, Keys: pl.msg.Keys, Hits: pl.hits})
	}
	clear(sv.parked[len(kept):])
	sv.parked = kept
}

func (sv *server) onFetch(s *Session, now time.Time, m *wire.Fetch) error {
	if len(m.Keys) == 0 {
		sv.terminal(s, now, m.ReqID)
		return nil
	}
	if len(m.Keys) != len(m.Slots) {
		return fmt.Errorf("fetch with %d keys and %d slots", len(m.Keys), len(m.Slots))
	}
	if _, dup := sv.byJob[m.Job]; dup {
		return fmt.Errorf("fetch reuses job %d", m.Job)
	}
	if len(sv.byJob) >= s.maxInflight() {
		return fmt.Errorf("fetch over max_inflight %d", s.maxInflight())
	}
	if sv.roundOf(m.ReqID, m.Round) == nil && sv.quota.peerRounds >= s.maxInflight() {
		return fmt.Errorf("fetch opens a round over the cap of %d", s.maxInflight())
	}
	r := sv.req(m.ReqID)
	rd := sv.peerRound(s, m.ReqID, m.Round, now)
	if rd.demand != nil {
		return fmt.Errorf("second fetch for %s round %d", m.ReqID, m.Round)
	}
	d := &demand{job: m.Job, keys: m.Keys, index: make(map[wire.Key][]uint32, len(m.Keys)), pending: len(m.Keys)}
	for i, k := range m.Keys {
		d.index[k] = append(d.index[k], uint32(i))
	}
	rd.demand = d
	put(&sv.byJob, m.Job, rd)
	rd.opened = true
	s.data(DataOp{Kind: OpOpen, Job: m.Job})
	if m.Round != 0 {
		// Symmetric rounds are numbered from 1 and their only supply is what
		// a lookup pinned: even a round whose pins the store timeout reaped
		// (so the round is new here) fails at once rather than park.
		rd.fromLookup = true
		r.symmetric = true
	} else if !r.seen {
		r.seen = true
		s.out.NewFetch = append(s.out.NewFetch, m.ReqID) // PD: bind and replay parked stores
	}
	if rd.fromLookup {
		// Symmetric: the supply is what the lookup pinned. Unfetched pins go
		// now (the next round re-pins); unmatched demand fails at once
		// instead of waiting for the consumer's load timeout (#49877).
		missing := 0
		for k := range d.index {
			if _, ok := rd.supply[k]; !ok {
				missing += len(d.index[k])
			}
		}
		for k, sp := range rd.supply {
			if _, want := d.index[k]; !want && sp.lookup {
				_ = s.blocks.Unpin(sp.slot)
				delete(rd.supply, k)
				rd.lookupPins = removeSlot(rd.lookupPins, sp.slot)
			}
		}
		if missing > 0 {
			s.logger().Warn(fmt.Sprintf("fetch demanded %d blocks but %d have no pinned supply; failing fetch immediately", len(m.Keys), missing),
				"req", m.ReqID, "round", m.Round, "job_id", m.Job)
			sv.cancel(s, rd)
			return nil
		}
	}
	sv.match(s, now, rd)
	if rd.finishing && !rd.sentLast {
		sv.cancelRound(s, now, rd) // the local request ended: no more supply will come
	}
	return nil
}

func removeSlot(xs []store.Slot, x store.Slot) []store.Slot {
	for i, v := range xs {
		if v == x {
			return append(xs[:i], xs[i+1:]...)
		}
	}
	return xs
}

// terminal handles the consumer's empty fetch: the request is over on the
// consumer's side. Rounds with nothing on the data path end now, silently.
func (sv *server) terminal(s *Session, now time.Time, id string) {
	r := sv.reqs[id]
	if r == nil {
		return
	}
	r.terminated = true
	for _, rd := range r.rounds {
		rd.silent = true
		if !rd.opened {
			sv.finalize(s, now, rd, false)
		}
	}
	sv.dropParked(id)
	sv.prune(id)
}

func (sv *server) dropParked(id string) {
	kept := sv.parked[:0]
	for _, pl := range sv.parked {
		if pl.msg.ReqID != id {
			kept = append(kept, pl)
		}
	}
	clear(sv.parked[len(kept):])
	sv.parked = kept
}

// cancelRound stops a round's data-path job; SendEnd finalizes it.
func (sv *server) cancelRound(s *Session, now time.Time, rd *round) {
	if rd.sentLast && rd.demand != nil && rd.demand.pending == 0 && !rd.aborting {
		return // everything is on its way: let it finish
	}
	sv.cancel(s, rd)
}

// cancel stops a round's data-path job, once; the writer's SendEnd
// finalizes the round.
func (sv *server) cancel(s *Session, rd *round) {
	rd.sentLast = true
	if rd.canceled {
		return
	}
	rd.canceled = true
	s.data(DataOp{Kind: OpCancel, Job: rd.demand.job})
}

func (sv *server) onAbort(s *Session, now time.Time, m *wire.Abort) {
	rd := sv.byJob[m.Job]
	if rd == nil || rd.req != m.ReqID || rd.num != m.Round {
		// Finished already (its terminal frame is on its way) or unknown.
		s.send(now, &wire.AbortAck{ReqID: m.ReqID, Round: m.Round, Job: m.Job})
		return
	}
	if rd.aborting || rd.acked {
		return // idempotent: the deadline is not reset, nothing is acked twice
	}
	rd.aborting = true
	rd.abortAt = now
	sv.cancel(s, rd)
}

// SendEnd reports that the data path wrote a producer job's terminal frame:
// it will not read the job's source slots again.
func (s *Session) SendEnd(now time.Time, job uint64, ok bool, bytes uint64) {
	sv := &s.server
	rd := sv.byJob[job]
	if rd == nil {
		return
	}
	delete(sv.byJob, job)
	dropEmpty(&sv.byJob)
	rd.opened = false
	switch {
	case rd.aborting:
		s.send(now, &wire.AbortAck{ReqID: rd.req, Round: rd.num, Job: job})
		ok = false
	case rd.acked:
		ok = false // aborted: whatever the writer did, the round was not served
	case !rd.silent:
		s.send(now, &wire.TransferDone{ReqID: rd.req, Round: rd.num, Job: job, Success: ok, Bytes: bytes})
	}
	sv.finalize(s, now, rd, ok)
}

// finalize ends a round: settles its store jobs and drops its lookup pins.
// Only called when the data path no longer reads its slots.
func (sv *server) finalize(s *Session, now time.Time, rd *round, ok bool) {
	if r := sv.reqs[rd.req]; r != nil && r.rounds[rd.num] == rd {
		delete(r.rounds, rd.num)
		if rd.byPeer {
			sv.addRounds(s, -1)
		}
		sv.prune(rd.req)
	}
	if rd.demand != nil {
		delete(sv.byJob, rd.demand.job)
		dropEmpty(&sv.byJob)
	}
	for _, sl := range rd.lookupPins {
		_ = s.blocks.Unpin(sl)
	}
	rd.lookupPins = nil
	for _, j := range rd.storeJobs {
		if _, live := sv.stores[j]; live {
			delete(sv.stores, j)
			dropEmpty(&sv.stores)
			s.out.Stores = append(s.out.Stores, StoreResult{Job: j, OK: ok})
		}
	}
	rd.storeJobs = nil
}

// finishLocal is the producer side of the local request's end: no more
// supply will come. Rounds with demand that cannot be met end now; rounds
// without demand wait for their fetch (prefiller-first) or the store timeout.
func (sv *server) finishLocal(s *Session, now time.Time, id string) {
	r := sv.reqs[id]
	if r == nil {
		return
	}
	r.finishing = true
	for _, rd := range r.rounds {
		rd.finishing = true
		if rd.demand != nil && !rd.sentLast {
			sv.cancelRound(s, now, rd)
		}
	}
	sv.dropParked(id)
	sv.prune(id)
}

func (sv *server) tick(s *Session, now time.Time) {
	if len(sv.parked) > 0 {
		sv.retryParked(s, now)
	}
	for _, r := range sv.reqs {
		for _, rd := range r.rounds {
			switch {
			case rd.aborting && rd.opened && now.Sub(rd.abortAt) >= s.cfg.CancelDrainTimeout:
				// The writer has not confirmed; ack anyway so the consumer is
				// not held, but keep the pins until SendEnd or DataClosed.
				s.logger().Warn("cancel drain timed out, acking abort", "req", rd.req, "round", rd.num, "job_id", rd.demand.job)
				s.send(now, &wire.AbortAck{ReqID: rd.req, Round: rd.num, Job: rd.demand.job})
				rd.silent = true
				rd.aborting = false
				rd.acked = true
			case !rd.opened && rd.fromLookup && len(rd.storeJobs) == 0 && now.Sub(rd.created) >= s.lookupPinTimeout():
				// Pins a lookup took and no fetch claimed: the engine needs
				// its store more than an idle peer does.
				s.logger().Debug("lookup pins released without a fetch", "req", rd.req, "round", rd.num, "pins", len(rd.lookupPins))
				sv.finalize(s, now, rd, false)
			case !rd.opened && now.Sub(rd.created) >= s.cfg.StoreTimeout:
				s.logger().Warn("store timed out without a fetch", "req", rd.req, "round", rd.num, "store_jobs", len(rd.storeJobs))
				sv.finalize(s, now, rd, false)
			case rd.opened && !rd.sentLast && len(rd.storeJobs) == 0 && len(rd.supply) == 0 && now.Sub(rd.created) >= s.unbackedFetchTimeout():
				// A fetch nothing backs: no store job came for it long
				// after a consumer with our timers would have given up.
				s.logger().Debug("fetch without supply timed out", "req", rd.req, "round", rd.num, "job_id", rd.demand.job)
				sv.cancel(s, rd)
			}
		}
	}
}

// close ends the producer role: nothing more is sent; store results and
// lookup pins wait for DataClosed (the writer may still read the slots).
func (sv *server) close(s *Session, now time.Time) {
	for _, r := range sv.reqs {
		for _, rd := range r.rounds {
			sv.deferredPins = append(sv.deferredPins, rd.lookupPins...)
			for _, j := range rd.storeJobs {
				if _, live := sv.stores[j]; live {
					sv.deferredStores = append(sv.deferredStores, StoreResult{Job: j})
				}
			}
		}
	}
	sv.reqs, sv.byJob, sv.stores = nil, nil, nil
	sv.parked = nil
	sv.addRounds(s, -sv.quota.peerRounds)
}

func (sv *server) dataClosed(s *Session) {
	for _, sl := range sv.deferredPins {
		_ = s.blocks.Unpin(sl)
	}
	s.out.Stores = append(s.out.Stores, sv.deferredStores...)
	sv.deferredPins, sv.deferredStores = nil, nil
}

// FinishConsumer is the local request's end on the consumer side: what is in
// flight is aborted (results now, slots later) and an open lookup is closed
// with the terminal empty fetch.
func (s *Session) FinishConsumer(now time.Time, id string) {
	if s.phase >= ended {
		return
	}
	s.client.finish(s, now, id)
}

// FinishProducer is the local request's end on the producer side: no more
// supply will come, so demand that cannot be met fails now.
func (s *Session) FinishProducer(now time.Time, id string) {
	if s.phase >= ended {
		return
	}
	s.server.finishLocal(s, now, id)
}

// WaitingProducers is how many PD requests this session serves that
// FinishProducers would finish: a peer's fetch or a store job opened them,
// and the local request has not finished.
func (s *Session) WaitingProducers() int {
	if s.phase >= ended {
		return 0
	}
	n := 0
	for _, r := range s.server.reqs {
		if (r.seen || r.rounds[0] != nil) && !r.finishing {
			n++
		}
	}
	return n
}

// FinishProducers is FinishProducer for every PD request this session
// serves (a peer's fetch or a store job opened its round 0): the local
// producer is gone, so no supply will come for any of them, registered by
// it or not. It returns their ids, sorted.
func (s *Session) FinishProducers(now time.Time) []string {
	if s.phase >= ended {
		return nil
	}
	var ids []string
	for id, r := range s.server.reqs {
		if r.seen || r.rounds[0] != nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids) // the data path hears of the rounds in a fixed order
	for _, id := range ids {
		s.server.finishLocal(s, now, id)
	}
	return ids
}
