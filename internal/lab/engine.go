package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/kvp2p/kvp2p/internal/engineapi/enginepb"
	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// rpcTimeout bounds one Step: a sidecar that stopped answering (a stall
// the driver did not expect) must not hang the driver.
const rpcTimeout = 3 * time.Second

// engine is the engine of one rank incarnation, as the lab plays it: it
// owns the region file's chunks, attaches to the sidecar, answers its
// asks from the blocks it holds, and turns workload calls into Steps.
//
// Chunk accounting (the engine's view, what vLLM's tier keeps): ref[c]
// counts who has chunk c besides the engine's cache: a load in flight, a
// store in flight, a grant the sidecar has not released. A chunk is free
// when ref is 0 and it holds no block; a cached block (held) whose chunk
// has ref 0 may be evicted. At the end, a chunk with ref > 0 on a live
// sidecar after the drain is a leaked slot.
type engine struct {
	rank   string
	region *os.File
	block  int
	cc     *grpc.ClientConn
	c      pb.EngineClient
	reg    uint64
	cancel context.CancelFunc
	done   chan struct{} // the Attach reader ended
	dead   atomic.Bool   // the Attach stream ended: the sidecar is gone

	mu      sync.Mutex
	held    map[wire.Key]uint32
	order   []wire.Key // held keys, oldest first, for eviction
	keyOf   map[uint32]wire.Key
	ref     []int32
	free    []uint32 // a stack: the most recently freed chunk is reused first
	pins    map[uint64][]uint32
	jobs    map[uint64]*ejob
	loadOf  map[string]uint64     // request -> its load in flight
	hits    map[string][]wire.Key // request -> the blocks its load brought
	results []loads.JobResult     // for Poll
	nextJob uint64
	nextPin uint64
	full    int // loads refused for want of free chunks
	memo    lookupMemo
}

type ejob struct {
	kind     pb.JobKind
	req      string
	keys     []wire.Key
	chunks   []uint32
	reported bool // the workload was told (failed_requests came first)
}

// attachEngine registers with the sidecar on sock, retrying until it
// answers or until deadline (a process just started, or a previous
// engine's chunks still draining: UNAVAILABLE).
func attachEngine(rank, sock, regionPath string, chunks, block int, deadline time.Time) (*engine, error) {
	f, err := os.OpenFile(regionPath, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	e := &engine{rank: rank, region: f, block: block, held: map[wire.Key]uint32{}, keyOf: map[uint32]wire.Key{},
		ref: make([]int32, chunks), pins: map[uint64][]uint32{}, jobs: map[uint64]*ejob{}, loadOf: map[string]uint64{},
		hits: map[string][]wire.Key{}, done: make(chan struct{})}
	for c := chunks - 1; c >= 0; c-- {
		e.free = append(e.free, uint32(c))
	}
	var last error
	for time.Now().Before(deadline) {
		if last = e.attach(sock, uint64(chunks), uint64(block), regionPath); last == nil {
			return e, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.Close()
	return nil, fmt.Errorf("%s: attaching to %s: %w", rank, sock, last)
}

func (e *engine) attach(sock string, chunks, stride uint64, regionPath string) error {
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	fail := func(err error) error { cancel(); cc.Close(); return err }
	st, err := pb.NewEngineClient(cc).Attach(ctx)
	if err != nil {
		return fail(err)
	}
	reg := &pb.Register{ApiVersion: pb.ApiVersion_API_VERSION_1, EngineId: e.rank, RegionPath: regionPath, NumChunks: chunks, RowStride: stride}
	if err := st.Send(&pb.EngineMessage{Msg: &pb.EngineMessage_Register{Register: reg}}); err != nil {
		return fail(err)
	}
	m, err := st.Recv()
	if err != nil {
		return fail(err)
	}
	if m.GetRegistered() == nil {
		return fail(errors.New("first answer is not Registered"))
	}
	e.cc, e.c, e.reg, e.cancel = cc, pb.NewEngineClient(cc), m.GetRegistered().GetRegistration(), cancel
	go e.serve(st)
	return nil
}

// serve answers the sidecar's asks, releases and pings until the stream
// ends; it is the stream's only sender.
func (e *engine) serve(st pb.Engine_AttachClient) {
	defer close(e.done)
	defer e.dead.Store(true)
	for {
		m, err := st.Recv()
		if err != nil {
			return
		}
		var out *pb.EngineMessage
		switch {
		case m.GetPing() != nil:
			out = &pb.EngineMessage{Msg: &pb.EngineMessage_Ping{Ping: m.GetPing()}}
		case m.GetAsk() != nil:
			out = &pb.EngineMessage{Msg: &pb.EngineMessage_Grant{Grant: e.grant(m.GetAsk())}}
		case m.GetRelease() != nil:
			e.mu.Lock()
			for _, id := range m.GetRelease().PinIds {
				e.unref(e.pins[id])
				delete(e.pins, id)
			}
			e.mu.Unlock()
		}
		if out != nil && st.Send(out) != nil {
			return
		}
	}
}

func (e *engine) grant(a *pb.ServeAsk) *pb.ServeGrant {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.nextPin++
	g := &pb.ServeGrant{AskId: a.AskId, PinId: e.nextPin}
	var pinned []uint32
	for _, kb := range a.Keys {
		if len(kb) != len(wire.Key{}) {
			continue
		}
		if c, ok := e.held[wire.Key(kb)]; ok {
			g.Keys = append(g.Keys, kb)
			g.ChunkIds = append(g.ChunkIds, c)
			e.ref[c]++
			pinned = append(pinned, c)
		}
	}
	if len(pinned) > 0 {
		e.pins[g.PinId] = pinned
	}
	return g
}

// close detaches (the sidecar fails this engine's jobs) and closes the
// region file.
func (e *engine) close() {
	if e.cancel != nil {
		e.cancel()
		<-e.done
		e.cc.Close()
	}
	e.region.Close()
}

// step sends one Step and takes in its answers.
func (e *engine) step(req *pb.StepRequest) (*pb.StepResponse, error) {
	if e.dead.Load() {
		return nil, errors.New("sidecar gone")
	}
	req.Registration = e.reg
	ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
	defer cancel()
	resp, err := e.c.Step(ctx, req)
	if err != nil {
		return nil, err
	}
	e.absorb(resp)
	return resp, nil
}

// absorb takes a Step's finished jobs and failed requests: chunks come
// back, and load results are queued for the workload. A request named in
// failed_requests is reported failed at once (that is when vLLM's engine
// learns it must prefill), its chunks only when its JobDone comes.
func (e *engine) absorb(resp *pb.StepResponse) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range resp.FailedRequests {
		jid, ok := e.loadOf[id]
		if !ok {
			continue
		}
		if j := e.jobs[jid]; j != nil && !j.reported {
			j.reported = true
			e.results = append(e.results, loads.JobResult{Job: jid, Kind: loads.JobLoad, ReqID: id, Reason: "failed_requests"})
		}
	}
	for _, d := range resp.Finished {
		j := e.jobs[d.JobId]
		if j == nil {
			continue
		}
		delete(e.jobs, d.JobId)
		if j.kind == pb.JobKind_JOB_KIND_STORE {
			// Only PD producers store: once the decoder fetched (or the
			// store ended), the blocks are not needed again.
			e.unref(j.chunks)
			for _, k := range j.keys {
				e.uncache(k)
			}
			continue
		}
		delete(e.loadOf, j.req)
		if d.Success {
			// The loaded chunks now hold the blocks; the request's
			// RequestFinished drops them (the lab keeps no prefix cache).
			for i, k := range j.keys {
				e.cache(k, j.chunks[i])
			}
			e.hits[j.req] = j.keys
		}
		e.unref(j.chunks)
		if !j.reported {
			e.results = append(e.results, loads.JobResult{Job: d.JobId, Kind: loads.JobLoad, ReqID: j.req, OK: d.Success, Bytes: d.Bytes, Reason: d.Reason})
		}
	}
}

// sidecarGone is what the engine does when its sidecar's stream ends: no
// job of it can finish, so every chunk is its own again, and the loads in
// flight have failed.
func (e *engine) sidecarGone() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for id, j := range e.jobs {
		if j.kind == pb.JobKind_JOB_KIND_LOAD && !j.reported {
			e.results = append(e.results, loads.JobResult{Job: id, Kind: loads.JobLoad, ReqID: j.req, Reason: "sidecar gone"})
		}
		e.unref(j.chunks)
	}
	for _, cs := range e.pins {
		e.unref(cs)
	}
	clear(e.jobs)
	clear(e.pins)
	clear(e.loadOf)
}

// held chunk bookkeeping; e.mu held.

func (e *engine) unref(cs []uint32) {
	for _, c := range cs {
		if e.ref[c]--; e.ref[c] == 0 {
			if _, ok := e.keyOf[c]; !ok {
				e.free = append(e.free, c)
			}
		}
	}
}

// cache records that chunk c holds k (replacing an older copy of k).
func (e *engine) cache(k wire.Key, c uint32) {
	if old, ok := e.held[k]; ok && old != c {
		e.uncache(k)
	}
	if _, ok := e.held[k]; !ok {
		e.order = append(e.order, k)
	}
	e.held[k] = c
	e.keyOf[c] = k
}

// uncache forgets the block k; its chunk is free once nobody has it.
func (e *engine) uncache(k wire.Key) {
	c, ok := e.held[k]
	if !ok {
		return
	}
	delete(e.held, k)
	delete(e.keyOf, c)
	if e.ref[c] == 0 {
		e.free = append(e.free, c)
	}
}

// alloc takes a free chunk, evicting the oldest unreferenced cached block
// if there is none; false when every chunk is in use.
func (e *engine) alloc() (uint32, bool) {
	if len(e.order) > 2*len(e.held)+64 {
		kept, seen := e.order[:0], make(map[wire.Key]bool, len(e.held))
		for _, k := range e.order {
			if _, ok := e.held[k]; ok && !seen[k] {
				seen[k] = true
				kept = append(kept, k)
			}
		}
		e.order = kept
	}
	for len(e.free) == 0 {
		victim := -1
		for i, k := range e.order {
			if c, ok := e.held[k]; ok && e.ref[c] == 0 {
				victim = i
				break
			}
		}
		if victim < 0 {
			break // every cached block is in use
		}
		k := e.order[victim]
		e.order = slices.Delete(e.order, victim, victim+1)
		e.uncache(k)
	}
	if len(e.free) == 0 {
		return 0, false
	}
	c := e.free[len(e.free)-1]
	e.free = e.free[:len(e.free)-1]
	return c, true
}

// inUse counts the chunks the sidecar still has: the leak measure.
func (e *engine) inUse() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, r := range e.ref {
		if r > 0 {
			n++
		}
	}
	return n
}

func (e *engine) takeResults() []loads.JobResult {
	e.mu.Lock()
	defer e.mu.Unlock()
	rs := e.results
	e.results = nil
	return rs
}
