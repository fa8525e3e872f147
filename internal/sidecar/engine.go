package sidecar

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/kvp2p/kvp2p/internal/node"
	"github.com/kvp2p/kvp2p/internal/session"

	"github.com/kvp2p/kvp2p/internal/engineapi"
	pb "github.com/kvp2p/kvp2p/internal/engineapi/enginepb"
	"github.com/kvp2p/kvp2p/internal/region"
	"github.com/kvp2p/kvp2p/internal/store"
	"github.com/kvp2p/kvp2p/internal/wire"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The sidecar side of the engine API (EngineConfig). Everything here runs
// in the node's loop, except the region pointer, which data-path goroutines
// read through Node.Slot.
//
// Chunk ownership, as the store sees it:
//
//   - a load's chunks are Filling from the Step that submits the load until
//     the load ends and no peer write can land (the same fence as the
//     node's own arena); the engine hears JobDone only then;
//   - a store's chunks are adopted (Ready, pinned) from its Step until its
//     result; a served grant's chunks are adopted until no peer reads them,
//     then released to the engine (ServeRelease);
//   - every other chunk is Free: the engine's.

// engine is the sidecar's state for its one engine.
type engine struct {
	cfg EngineConfig
	geo region.Geometry
	// geoFrom says where geo came from, for a refusal's message: the
	// config, or the first engine's Register (New).
	geoFrom string
	srv     *engineapi.Server
	mem     atomic.Pointer[region.Region] // read by data-path goroutines
	// memReg is the registration whose region mem is: Detach revokes the
	// region from the gRPC goroutine, before the loop hears of it.
	memReg   atomic.Uint64
	reg      uint64              // current registration; 0: none
	contains func(wire.Key) bool // the store's index, set by New
	// orphans: an engine detached, and the sessions it dialed are ended
	// (once idle) until another engine attaches.
	orphans bool
	last    uint64 // last registration handed out
	out     engineapi.Outbox

	jobs    map[jobKey]*engJob // (registration, the engine's job id) -> job
	byCore  map[uint64]*engJob // the table's job id -> job
	reqs    map[string]bool    // requests the engine registered and has not finished
	done    []*pb.JobDone      // to report in the next Step
	failed  []string           // requests to report failed in the next Step
	waiting []*engJob          // failed loads whose chunks are still fenced

	nextAsk   uint64
	batch     []wire.Key             // keys to ask the engine for, this turn
	asked     map[wire.Key]uint64    // keys in an ask not answered yet -> the session asking (asks.go)
	askedBy   map[uint64]int         // session -> keys it has asked, not answered yet
	asks      map[uint64]*ask        // asks not answered yet
	missed    map[wire.Key]time.Time // recently answered "not held": no new ask until then
	grants    map[uint64]*grant      // engine pin id -> what kvp2p adopted for it
	grantPins map[store.Slot]int     // slot -> pins held by grants

	// A step's lookups, reused from step to step (the loop's only).
	lookKeys []wire.Key
	lookOut  []session.Verdict

	probe stallProbe // of the engine's steps, while peers' PD fetches wait (stall.go)
	// pid is the attached engine's process (0: unknown); tree reads the
	// state of it and its workers (engineapi.TreeState; tests replace it).
	pid  int
	tree func(pid int) (runnable, stopped bool)
}

type jobKey struct{ reg, id uint64 }

type engJob struct {
	id, core uint64
	kind     pb.JobKind
	req      string
	keys     int
	slots    []store.Slot // a store's adopted chunks
	reg      uint64       // registration that submitted it
	start    time.Time
	result   *pb.JobDone // a failed load's result, held until its chunks are free
}

type ask struct {
	keys  []wire.Key
	at    time.Time
	grace int // serve_timeouts added because the engine was starved, not stopped (asks.go)
}

type grant struct {
	pin   uint64
	slots []store.Slot
}

// Limits on what peers can make the sidecar ask of its engine: keys
// asked and not answered yet, shared among sessions (asks.go).
const (
	maxAskedKeys = 1 << 14                // in all; beyond, peers' lookups answer MISS
	missMemory   = 100 * time.Millisecond // a key the engine just did not have is not asked again
)

func newEngine(cfg EngineConfig, slots, blockBytes int) *engine {
	return &engine{
		cfg: cfg.WithDefaults(), geo: region.Geometry{NumChunks: uint64(slots), RowStride: uint64(blockBytes)},
		geoFrom: "slots, block_bytes",
		jobs:    map[jobKey]*engJob{}, byCore: map[uint64]*engJob{}, reqs: map[string]bool{},
		asked: map[wire.Key]uint64{}, askedBy: map[uint64]int{}, asks: map[uint64]*ask{}, missed: map[wire.Key]time.Time{},
		grants: map[uint64]*grant{}, grantPins: map[store.Slot]int{},
		tree: engineapi.TreeState,
	}
}

// openRegion checks reg against the node's geometry and identity and maps
// its region (outside the loop: the loop does no file I/O).
func (e *engine) openRegion(n *node.Node, reg *pb.Register) (*region.Region, error) {
	geo := region.Geometry{NumChunks: reg.NumChunks, RowStride: reg.RowStride}
	if geo != e.geo {
		return nil, status.Errorf(codes.FailedPrecondition,
			"region of %d chunks of %d bytes; this sidecar's geometry is %d of %d (%s)",
			reg.NumChunks, reg.RowStride, e.geo.NumChunks, e.geo.RowStride, e.geoFrom)
	}
	if err := checkIdentity(reg, n.Config()); err != nil {
		return nil, err
	}
	r, err := region.Open(reg.RegionPath, e.cfg.RegionDir, geo)
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "%v", err)
	}
	return r, nil
}

// checkIdentity refuses an engine whose layout fingerprint or block-hash
// seed differs from the sidecar's (when both are set).
func checkIdentity(reg *pb.Register, cfg node.Config) error {
	if fp := cfg.Fingerprint; fp != "" && len(reg.Fingerprint) > 0 && string(reg.Fingerprint) != fp {
		return status.Errorf(codes.FailedPrecondition, "layout fingerprint %q, the sidecar's is %q", reg.Fingerprint, fp)
	}
	if seed := cfg.HashSeed; seed != "" && reg.HashSeed != "" && reg.HashSeed != seed {
		return status.Errorf(codes.FailedPrecondition, "block-hash seed %q, the sidecar's hash_seed is %q: no key would ever hit", reg.HashSeed, seed)
	}
	return nil
}

// attachRegion registers the engine whose region r is (mapped already);
// r is closed if the registration is refused.
func (e *engine) attachRegion(n *node.Node, r *region.Region, out engineapi.Outbox) (*pb.Registered, error) {
	var ok *pb.Registered
	var refuse error
	var old *region.Region
	err := n.Do(func(now time.Time) { ok, old, refuse = e.attach(n, r, out) })
	if err == nil && refuse == nil {
		if old != nil {
			old.Close() // nothing touches it (attach checked); unmapping can take long: not in the loop
		}
		return ok, nil
	}
	r.Close()
	if err != nil {
		return nil, errNodeClosed
	}
	return nil, refuse
}

// attach registers an engine, in the loop, and posts Registered to it
// before anything else can be. It returns the previous engine's region for
// the caller to close outside the loop.
func (e *engine) attach(n *node.Node, r *region.Region, out engineapi.Outbox) (*pb.Registered, *region.Region, error) {
	if e.reg != 0 {
		return nil, nil, status.Error(codes.AlreadyExists, "an engine is attached to this sidecar")
	}
	if st := n.Store().Stats(); st.Filling > 0 || st.Pinned > 0 {
		// The previous engine's loads or serves still touch its region.
		return nil, nil, status.Errorf(codes.Unavailable, "the previous engine's chunks are still in use (%d filling, %d pinned): retry", st.Filling, st.Pinned)
	}
	old := e.mem.Swap(r)
	// The registration is the Step's credential: not guessable, so that
	// another client of the socket (or of engine.addr) cannot step as the
	// engine, and never an earlier engine's.
	e.reg = randomRegistration(e.last)
	e.last = e.reg
	e.orphans = false
	e.probe = stallProbe{}
	n.Table().ProducerBack() // fetches for requests it has not registered yet wait for it again
	e.memReg.Store(e.reg)
	ok := &pb.Registered{
		Registration: e.reg, ApiVersion: pb.ApiVersion_API_VERSION_1,
		PeerId: n.Config().PeerID, FailureDomain: n.Config().FailureDomain,
		MaxKeysPerStep: uint32(engineapi.DefaultLimits().MaxKeysPerStep), MaxJobsInFlight: uint32(e.cfg.MaxJobs),
	}
	out.Post(&pb.SidecarMessage{Msg: &pb.SidecarMessage_Registered{Registered: ok}})
	e.out = out // from here on asks may follow
	e.pid = engineapi.PeerPID(out)
	return ok, old, nil
}

// randomRegistration draws a non-zero registration other than prev.
func randomRegistration(prev uint64) uint64 {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			panic(err) // crypto/rand does not fail on Linux
		}
		if id := binary.LittleEndian.Uint64(b[:]); id != 0 && id != prev {
			return id
		}
	}
}

// revoke, when id is the engine whose region is mapped, revokes its
// region: from now on no peer write reaches its memory.
func (e *engine) revoke(n *node.Node, id uint64) {
	if e.memReg.Load() == id {
		// The engine reuses the chunks of failed loads as soon as it
		// decides we are gone: from now on no peer write reaches its
		// memory, even one already on its way into a chunk.
		if r := e.mem.Load(); r != nil {
			if err := r.Revoke(); err != nil {
				n.Log().Error("revoking a gone engine's region failed", "err", err)
			}
		}
	}
}

// detach forgets an engine that is gone: peers' PD fetches waiting on it
// fail, its requests end (loads in flight are aborted; their chunks stay
// fenced until no write can land), what it pinned for peers is retired,
// and nothing more is reported to it. Peers' lookups waiting on its asks
// answer MISS at the next tick (the asks are forgotten: engine.Pending).
func (e *engine) detach(n *node.Node, now time.Time, id uint64) {
	if id == 0 || e.reg != id {
		return
	}
	n.Log().Warn("engine gone: aborting its jobs", "jobs", len(e.jobs), "requests", len(e.reqs))
	e.reg, e.out, e.orphans = 0, nil, true
	e.probe = stallProbe{}
	// First, while the table still knows the engine's requests: peers'
	// PD fetches waiting here, for requests it registered or not, fail
	// now and their decoders fall back (issue 23: they waited for their
	// PD load timeout), and none waits for this engine's ids afterwards.
	if fetches := n.Table().ProducerGone(now); fetches > 0 {
		n.Log().Info("engine gone: peers' PD fetches failed", "requests", fetches)
	}
	for req := range e.reqs {
		n.Table().RequestFinished(now, req)
	}
	clear(e.reqs)
	for _, g := range e.grants {
		for _, sl := range g.slots {
			_ = n.Store().Retire(sl)
		}
		e.release(n, g, false)
	}
	// Its stores: no decoder or peer may read its chunks from now on (a
	// restarted engine rewrites them); parked ones fail at once.
	for _, j := range e.jobs {
		for _, sl := range j.slots {
			_ = n.Store().Retire(sl)
		}
	}
	if failed := n.Table().FailUnboundStores(now, "engine gone"); failed > 0 {
		n.Log().Info("engine gone: parked stores failed", "jobs", failed)
	}
	clear(e.asks)
	clear(e.asked)
	clear(e.askedBy)
	clear(e.missed)
	e.batch = e.batch[:0]
	e.done, e.failed = nil, nil
	e.collect(n, now) // settle what the aborts decided; jobs of a gone engine report nothing
}

// grant adopts the chunks the engine pinned for an ask.
func (e *engine) grant(n *node.Node, now time.Time, id uint64, g *pb.ServeGrant) {
	if id != e.reg {
		return
	}
	if e.probeAnswered(n, now, g) {
		return
	}
	a := e.asks[g.AskId]
	if a == nil || len(g.Keys) != len(g.ChunkIds) {
		// Late (its ask expired) or malformed: give the pins back unused.
		if g.PinId != 0 {
			e.post(&pb.SidecarMessage{Msg: &pb.SidecarMessage_Release{Release: &pb.ServeRelease{PinIds: []uint64{g.PinId}}}})
		}
		return
	}
	delete(e.asks, g.AskId)
	held := make(map[wire.Key]bool, len(g.Keys))
	if g.PinId == 0 && len(g.Keys) > 0 {
		// No pin to give back: kvp2p could never say when it is done.
		n.Log().Warn("engine granted chunks without a pin id: not served", "ask", g.AskId)
		g.Keys, g.ChunkIds = nil, nil
	}
	gr := e.grants[g.PinId] // a pin id granted twice is one pin: one release covers both
	if gr == nil {
		gr = &grant{pin: g.PinId}
	}
	for i, kb := range g.Keys {
		c := g.ChunkIds[i]
		if len(kb) != len(wire.Key{}) || uint64(c) >= e.geo.NumChunks {
			continue
		}
		k := wire.Key(kb)
		if err := n.Store().Adopt(store.Slot(c), k); err != nil {
			n.Log().Warn("engine granted a chunk kvp2p cannot serve", "chunk", c, "err", err)
			continue
		}
		e.grantPins[store.Slot(c)]++
		gr.slots = append(gr.slots, store.Slot(c))
		held[k] = true
	}
	for _, k := range a.keys {
		e.answered(k)
		if !held[k] {
			e.missed[k] = now.Add(missMemory)
		}
	}
	if len(gr.slots) == 0 {
		e.release(n, gr, g.PinId != 0)
		return
	}
	e.grants[g.PinId] = gr
}

// release gives a grant's chunks back to the engine.
func (e *engine) release(n *node.Node, g *grant, tell bool) {
	for _, sl := range g.slots {
		if e.grantPins[sl]--; e.grantPins[sl] <= 0 {
			delete(e.grantPins, sl)
		}
		if err := n.Store().Drop(sl); err != nil {
			n.Log().Error("drop of a granted chunk failed", "chunk", sl, "err", err)
		}
	}
	delete(e.grants, g.pin)
	if tell {
		e.post(&pb.SidecarMessage{Msg: &pb.SidecarMessage_Release{Release: &pb.ServeRelease{PinIds: []uint64{g.pin}}}})
	}
}

func (e *engine) post(m *pb.SidecarMessage) {
	if e.out != nil {
		e.out.Post(m)
	}
}

// Pending implements loads.Resolver: session asker's peer looked up a key
// kvp2p does not hold; ask the engine (batched per loop turn) and let the
// lookup wait, within asker's share of what may be asked (mayAsk).
func (e *engine) Pending(asker uint64, k wire.Key) bool {
	if e.reg == 0 || e.contains(k) {
		// Indexed already (a lookup could not pin it: peers' pins are at
		// their cap): asking the engine again would not help.
		return false
	}
	if _, ok := e.asked[k]; ok {
		return true
	}
	if _, recent := e.missed[k]; recent || !e.mayAsk(asker) {
		return false
	}
	e.asked[k] = asker
	e.askedBy[asker]++
	e.batch = append(e.batch, k)
	return true
}

// AfterTurn (node.EngineHooks) runs after every loop turn: it sends this
// turn's asks and collects finished jobs.
func (e *engine) AfterTurn(n *node.Node, now time.Time) {
	if len(e.batch) > 0 && e.reg != 0 {
		e.nextAsk++
		keys := append([]wire.Key(nil), e.batch...)
		e.asks[e.nextAsk] = &ask{keys: keys, at: now}
		raw := make([][]byte, len(keys))
		for i := range keys {
			raw[i] = keys[i][:]
		}
		e.post(&pb.SidecarMessage{Msg: &pb.SidecarMessage_Ask{Ask: &pb.ServeAsk{AskId: e.nextAsk, Keys: raw}}})
	}
	e.batch = e.batch[:0]
	e.collect(n, now)
}

// Tick (node.EngineHooks) expires asks and remembered misses, and releases grants no peer
// reads any more. It runs after the table's own tick, so a lookup waiting
// for a grant has pinned it by then.
func (e *engine) Tick(n *node.Node, now time.Time) {
	if e.orphans {
		if ended := n.Table().EndOutboundIdle(now); ended > 0 {
			n.Log().Info("engine gone: ended the sessions it dialed", "sessions", ended)
		}
	}
	tree := e.treeOnce() // read /proc at most once a tick, for both
	e.expireAsks(n, now, tree)
	e.watchSteps(n, now, tree)
	for k, until := range e.missed {
		if !now.Before(until) {
			delete(e.missed, k)
		}
	}
	for _, g := range e.grants {
		if e.unread(n, g) {
			e.release(n, g, true)
		}
	}
}

// unread reports whether only grants pin the grant's chunks.
func (e *engine) unread(n *node.Node, g *grant) bool {
	for _, sl := range g.slots {
		if n.Store().Pins(sl) > e.grantPins[sl] {
			return false
		}
	}
	return true
}

// collect turns the table's results into the engine's.
func (e *engine) collect(n *node.Node, now time.Time) {
	for _, r := range n.TakeResults() {
		j := e.byCore[r.Job]
		if j == nil {
			continue
		}
		d := &pb.JobDone{JobId: j.id, Kind: j.kind, Success: r.OK, Reason: r.Reason, Bytes: r.Bytes}
		if r.OK {
			d.Successful = make([]uint32, j.keys)
			for i := range d.Successful {
				d.Successful[i] = uint32(i)
			}
		}
		if j.kind == pb.JobKind_JOB_KIND_STORE {
			read := false
			for _, sl := range j.slots {
				if n.Store().Pins(sl)-1 > e.grantPins[sl] {
					// A peer still reads it (a lookup's pin): no new reader
					// finds it, and the engine hears of the store only
					// when the last one is done.
					_ = n.Store().Retire(sl)
					read = true
				}
				if err := n.Store().Drop(sl); err != nil {
					n.Log().Error("drop of a stored chunk failed", "chunk", sl, "err", err)
				}
			}
			if read {
				j.result = d
				e.waiting = append(e.waiting, j)
				continue
			}
		}
		if j.kind == pb.JobKind_JOB_KIND_LOAD && !r.OK {
			if j.reg == e.reg {
				e.failed = append(e.failed, j.req)
			}
			if n.Table().Holds(j.core) {
				j.result = d
				e.waiting = append(e.waiting, j)
				continue
			}
		}
		e.finish(j, d, now)
	}
	if len(e.waiting) > 0 {
		kept := e.waiting[:0]
		for _, j := range e.waiting {
			if e.stillHeld(n, j) {
				kept = append(kept, j)
				continue
			}
			e.finish(j, j.result, now)
		}
		clear(e.waiting[len(kept):])
		e.waiting = kept
	}
}

// stillHeld reports whether a finished job's chunks are not the engine's
// yet: a failed load's until no peer write can land, a store's until no
// peer reads them (grants aside: the engine pinned those itself).
func (e *engine) stillHeld(n *node.Node, j *engJob) bool {
	if j.kind == pb.JobKind_JOB_KIND_LOAD {
		return n.Table().Holds(j.core)
	}
	for _, sl := range j.slots {
		if n.Store().Pins(sl) > e.grantPins[sl] {
			return true
		}
	}
	return false
}

func (e *engine) finish(j *engJob, d *pb.JobDone, now time.Time) {
	delete(e.byCore, j.core)
	delete(e.jobs, jobKey{j.reg, j.id})
	if j.reg != e.reg {
		return // its engine is gone
	}
	d.TransferUs = uint64(now.Sub(j.start).Microseconds())
	e.done = append(e.done, d)
}

// Slot (node.EngineHooks) is the engine region's chunk i; nil while no
// region is mapped. Data-path goroutines call it.
func (e *engine) Slot(i uint32) []byte {
	if r := e.mem.Load(); r != nil {
		return r.Chunk(i)
	}
	return nil
}

// Attached (node.EngineHooks) reports whether an engine is registered.
func (e *engine) Attached() bool { return e.reg != 0 }

// Stop (node.EngineHooks) stops the engine API and unmaps the region once
// the node stopped.
func (e *engine) Stop() {
	e.srv.Stop()
	e.close()
}

var _ node.EngineHooks = (*engine)(nil)

// close unmaps the region.
func (e *engine) close() {
	if r := e.mem.Swap(nil); r != nil {
		r.Close()
	}
}

func (e *engine) String() string { return fmt.Sprintf("engine(reg %d, %d jobs)", e.reg, len(e.jobs)) }
