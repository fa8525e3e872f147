package loads

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/store"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// conn is one session and what the table knows of it. The fields every
// message and timer reads come first (a heartbeat touches them and little
// else; a large fleet's conns are far apart in memory: one cache line
// rather than four).
type conn struct {
	id      ConnID
	s       *session.Session
	tm      timerState
	st      connState   // its connections, as the node was told (conn_state.go)
	rep     reportState // what the policy heard of it (conn_state.go)
	touched bool        // in the table's touched queue (settle collects its output)
	flush   bool        // in the table's flush queue (lookups registered this step)
	// watched: the policy probed this session's data path and wants to
	// hear of its traffic until the check ends (health.Witness); cleared
	// when the policy says it no longer does.
	watched bool
	// rejected: refused before it became a session (duplicate, over cap),
	// ended by an orderly local stop, or a connect attempt racing the one
	// that superseded it (racing): the policy never hears of it.
	rejected bool
	racing   bool    // a stale attempt kept until a handshake finishes (racedial.go)
	raced    bool    // it was raced once (race): an older attempt, even after it is crowned
	refused  bool    // its dial was refused (DialRefused)
	answered bool    // its dial reached a listening kernel (DialAnswered, Connected)
	endedBy  endedBy // why the table ended it, if it did
	// A newcomer held while the live session it would replace is probed
	// (hold.go): holdFor is that session, which points back by heldBy.
	holdFor   *conn
	heldBy    *conn
	holdUntil time.Time
	holdSeq   uint64
	linger    time.Time // connLingering: close at this time at the latest
	peer      string    // as dialed, or as the peer's Hello named it
	domain    string    // router-named domain (wins over the advertised one)

	// pins: the slots its peer's lookups pin, and how often; nil if none
	// (pins.go).
	pins map[store.Slot]int
	// share: the quota of open rounds its session shares with its
	// source's other sessions, once its session asked (pins.go).
	share *sourceShare
}

// request is one engine request.
type request struct {
	id       string
	src      *source
	dst      *dest
	waitFrom time.Time     // first RETRY the policy asked for
	budget   time.Duration // how long it may wait in all, fixed at waitFrom
	fellBack bool          // a lookup's MISS sent it to local prefill (counted once)
	redialed bool          // its session ended while it waited, and it dialed again
}

// job is a load or store in flight.
type job struct {
	id    uint64
	kind  JobKind
	req   string // engine request id
	kvID  string
	slots []store.Slot
	conn  ConnID
	keys  []wire.Key
	at    time.Time // submitted; zero for a job that failed at submission
	st    jobState  // see job_state.go; a job in t.jobs is never jobDone
}

type unboundBatch struct {
	job   uint64
	keys  []wire.Key
	slots []store.Slot
	at    time.Time
}

// Table is the manager's state. See the package doc for the contract.
type Table struct {
	cfg    Config
	log    *slog.Logger
	store  *store.Store
	policy health.Policy

	conns      map[ConnID]*conn
	nLive      int              // liveCount
	list       []*conn          // conns in creation order: deterministic iteration
	ended      []*conn          // sessions that ended, in order, for settle to reap
	touched    []*conn          // sessions whose output settle collects, in order
	touchedAt  int              // settle's position in touched
	askPolicy  bool             // settle applies the policy's decisions
	policyTick bool             // settle runs the policy's Tick first
	flushQ     []*conn          // sessions with lookups registered this step
	lastPrune  time.Time        // last pruning of the reaped ids
	byPeer     map[string]*conn // the live session per peer id
	nextConn   ConnID
	nextJob    uint64
	nextHold   uint64       // the table's own probes (hold.go)
	repl       Replacements // replaced and refused newcomers (hold.go)

	// Superseded connect attempts still racing the current one, per peer,
	// oldest first (racedial.go).
	racers map[string][]*conn

	reqs     map[string]*request
	failed   map[string]struct{} // kv request ids whose next lookup is MISS
	liveSrc  map[string]int      // kv request id -> live consumer requests naming it
	jobs     map[uint64]*job
	bound    map[string]*conn  // producer: kv id -> session its fetch came on
	decoders map[string]string // producer: kv id -> the decoder remote_decoder names (handoff.go)
	// shortIDSaid: a short capability id was logged (handoff.go).
	shortIDSaid bool
	unbound     map[string][]unboundBatch
	finished    map[string]bool      // producer requests finished before they were bound
	reaped      map[string]time.Time // unbound ids reaped: a late fetch is refused at once
	filling     map[wire.Key]int     // keys being loaded here (a lookup for them waits)
	// Slots pinned for peers' lookups, with how many sessions pin each,
	// and what each source pins (pins.go).
	peerSlots  map[store.Slot]int
	pinSources map[string]*pinSource
	shares     map[string]*sourceShare // open rounds by source (pins.go)

	results []JobResult
	actions []Action

	// noProducer: the engine that produced this node's PD blocks is gone
	// (ProducerGone) and none is back: a new fetch is refused at once.
	noProducer bool

	shuttingDown  bool
	shutdownAt    time.Time
	shutdownClose bool

	queues   [nQueues]timerQueue // see deadlines.go
	dirty    []*conn             // conns whose deadlines may have changed
	visit    visit
	timerErr error
}

// New builds a table over the node's block store.
func New(cfg Config, st *store.Store) (*Table, error) {
	if cfg.Policy == nil {
		return nil, fmt.Errorf("loads: no failure policy")
	}
	if st == nil || st.BlockBytes() != int(cfg.Session.BlockBytes) {
		return nil, fmt.Errorf("loads: store block size does not match the session config")
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.Session.Log = log
	t := &Table{
		cfg: cfg, log: log, store: st, policy: cfg.Policy,
		conns: map[ConnID]*conn{}, byPeer: map[string]*conn{}, racers: map[string][]*conn{},
		reqs: map[string]*request{}, failed: map[string]struct{}{}, liveSrc: map[string]int{}, jobs: map[uint64]*job{},
		bound: map[string]*conn{}, decoders: map[string]string{}, unbound: map[string][]unboundBatch{}, finished: map[string]bool{},
		reaped: map[string]time.Time{}, filling: map[wire.Key]int{}, peerSlots: map[store.Slot]int{},
		pinSources: map[string]*pinSource{}, shares: map[string]*sourceShare{},
	}
	for k := range t.queues {
		t.queues[k].k = k
	}
	return t, nil
}

// markFailed puts a consumer kv request id into the failed set, so that its
// lookups are MISS until the request finishes. An id no live request names
// is not recorded: the set would only grow (a load's failure is often
// published by the request's own finish).
//
// The first time a live request is marked, why is logged (at info: the
// node's log is rate-limited per message): a fallback that says nothing is
// one nobody can explain afterwards, and most of these ends are decided here,
// where no load failed and no peer said anything.
func (t *Table) markFailed(kvID, why string) {
	if t.liveSrc[kvID] == 0 {
		return
	}
	if _, already := t.failed[kvID]; !already {
		t.log.Info("request falls back to local prefill", "kv_req", kvID, "why", why)
	}
	t.failed[kvID] = struct{}{}
}

// Failed reports whether kv request id is in the failed set.
func (t *Table) Failed(kvID string) bool { _, ok := t.failed[kvID]; return ok }

func (t *Table) newConn(peer string, outbound bool, now time.Time) *conn {
	t.nextConn++
	c := &conn{id: t.nextConn, peer: peer}
	c.s = session.New(&t.cfg.Session, peerBlocks{t, c}, peer, outbound, now)
	t.conns[c.id] = c
	t.nLive++
	t.list = append(t.list, c)
	t.markDirty(c) // its handshake deadline
	return c
}

// lingerFor bounds how long an orderly ended session's data connection
// stays open for loads its producer reported sent.
const lingerFor = time.Second

// compact drops gone conns from the creation-order list.
func (t *Table) compact() {
	kept := t.list[:0]
	for _, c := range t.list {
		if c.st != connGone {
			kept = append(kept, c)
		}
	}
	clear(t.list[len(kept):])
	t.list = kept
}

// liveCount is the number of sessions that count against the peer cap:
// conns in the table neither reaped nor rejected. It is kept as they
// come (newConn) and go (reject, report, DataClosed), not counted on
// every dial: a consumer dials in a loop over hundreds of sessions.
func (t *Table) liveCount() int { return t.nLive }

// reject marks c rejected (see conn.rejected).
func (t *Table) reject(c *conn) {
	if !c.rejected && c.rep != reaped && c.st != connGone {
		t.nLive--
	}
	c.rejected = true
}

// countLive counts what liveCount keeps (checkTimers compares the two).
func (t *Table) countLive() int {
	n := 0
	for _, c := range t.conns {
		if c.rep != reaped && !c.rejected {
			n++
		}
	}
	return n
}

// session returns a live session to peer, opening one if the policy and the
// cap allow. nil means the request must fall back.
func (t *Table) session(now time.Time, peer, domain string) *conn {
	var raced *conn // a stale attempt raced: kept current if no fresh one is dialed
	if c := t.byPeer[peer]; c != nil && c.s.Ended() == health.CauseNone {
		// One current connect attempt per peer; but one that outlived the
		// time a request may wait for it is superseded on demand rather
		// than waited out: a fresh attempt is dialed. One no kernel
		// answered went into a partition and is closed; one the peer's
		// kernel answered races the fresh one (racedial.go): its Hello
		// may be lost to a partition that healed, or its peer only slow.
		w := t.policy.Waits(now, health.Peer{ID: peer, Domain: domain})
		stale := w.StaleDial > 0 && c.s.Outbound() && c.s.Pending() && now.Sub(c.s.PendingSince()) >= w.StaleDial
		if !stale && !unanswered(now, c, w) {
			if domain != "" {
				c.domain = domain
			}
			return c
		}
		if c.answered {
			t.race(now, c)
			raced = c
		} else {
			t.log.Info("replacing a stale connect attempt", "peer", peer, "pending_for", now.Sub(c.s.PendingSince()))
			t.reject(c) // never a session: nothing to hold against anyone
			c.s.Close(now, health.CauseHandshakeFailed)
			t.touch(c)
		}
	}
	if t.shuttingDown {
		return t.unrace(raced)
	}
	if !t.policy.MayDial(now, health.Peer{ID: peer, Domain: domain, Outbound: true}) {
		t.log.Info("not dialing: quarantined by policy", "peer", peer, "policy", t.policy.Name())
		return t.unrace(raced)
	}
	if t.liveCount() >= t.cfg.MaxPeers {
		t.log.Warn("not dialing: peer cap reached", "peer", peer, "max_peers", t.cfg.MaxPeers)
		return t.unrace(raced)
	}
	c := t.newConn(peer, true, now)
	c.domain = domain
	t.byPeer[peer] = c
	t.actions = append(t.actions, Action{Kind: ActDial, Conn: c.id, Peer: peer})
	return c
}

// unanswered reports whether c is a connect attempt that no kernel has
// answered for the policy's Waits.Unanswered: it went into a partition.
func unanswered(now time.Time, c *conn, w health.Waits) bool {
	return w.Unanswered > 0 && !c.answered && c.s.Outbound() && c.s.Pending() &&
		now.Sub(c.s.PendingSince()) >= w.Unanswered
}

func (t *Table) loadDone(now time.Time, c *conn, r session.LoadResult) {
	j := t.jobs[r.Job]
	if j == nil {
		return
	}
	t.policy.LoadDone(now, t.peerOf(c), r.OK)
	if r.OK {
		for _, sl := range j.slots {
			if t.cfg.ExternalSlots {
				// The bytes are in the engine's chunk; the chunk is the
				// engine's again, and kvp2p serves it only if the engine
				// pins it for a peer later.
				if err := t.store.CancelFill(sl); err != nil {
					t.log.Error("release of a loaded chunk failed", "job_id", j.id, "err", err)
				}
				continue
			}
			if err := t.store.Commit(sl); err != nil {
				t.log.Error("commit of a loaded slot failed", "job_id", j.id, "err", err)
			}
		}
		t.unfill(j)
		t.moveJob(j, jobDone)
	} else {
		t.moveJob(j, jobHolding)
		t.markFailed(j.kvID, "load failed: "+r.Reason)
	}
	t.publish(JobResult{Job: r.Job, Kind: JobLoad, ReqID: j.req, OK: r.OK, Bytes: r.Bytes, Reason: r.Reason}, j.at)
}

// release frees a failed load's destination slots: both writers stopped.
func (t *Table) release(jobID uint64) {
	j := t.jobs[jobID]
	if j == nil || j.kind != JobLoad {
		return
	}
	for _, sl := range j.slots {
		if err := t.store.CancelFill(sl); err != nil {
			t.log.Error("cancelling the fill of a failed load's slot failed", "job_id", j.id, "err", err)
		}
	}
	t.unfill(j)
	t.moveJob(j, jobDone)
}

func (t *Table) unfill(j *job) {
	for _, k := range j.keys {
		if t.filling[k]--; t.filling[k] <= 0 {
			delete(t.filling, k)
		}
	}
}

func (t *Table) storeDone(r session.StoreResult) {
	j := t.jobs[r.Job]
	if j == nil || j.kind != JobStore {
		return
	}
	t.moveJob(j, jobDone)
	for _, sl := range j.slots {
		if err := t.store.Unpin(sl); err != nil {
			t.log.Error("unpin of a store job's slot failed", "job_id", j.id, "err", err)
		}
	}
	t.publish(JobResult{Job: r.Job, Kind: JobStore, ReqID: j.req, OK: r.OK}, j.at)
}

// bind ties a producer request id to the session its first fetch came on
// and replays its parked store batches. A fetch for an id whose stores were
// reaped (vLLM #53453), or that comes while no engine produces here
// (ProducerGone), is refused within one round trip.
func (t *Table) bind(now time.Time, c *conn, kvID string) {
	if !t.mayBind(now, c, kvID) {
		return
	}
	if t.wasReaped(now, kvID) {
		t.log.Warn("late fetch for a reaped store, refusing", "req", kvID, "peer", c.peer)
		c.s.FinishProducer(now, kvID)
		return
	}
	if t.noProducer {
		t.log.Warn("fetch while no engine is attached, refusing", "req", kvID, "peer", c.peer)
		c.s.FinishProducer(now, kvID)
		return
	}
	t.bound[kvID] = c
	for _, b := range t.unbound[kvID] {
		if j := t.jobs[b.job]; j != nil {
			t.moveJob(j, jobRunning)
		}
		c.s.AddStoredBlocks(now, kvID, b.keys, b.slots, b.job)
	}
	delete(t.unbound, kvID)
	if t.finished[kvID] {
		delete(t.finished, kvID)
		delete(t.decoders, kvID)
		c.s.FinishProducer(now, kvID)
	}
}
