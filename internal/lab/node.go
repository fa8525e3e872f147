package lab

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	pb "github.com/kvp2p/kvp2p/internal/engineapi/enginepb"
	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/wire"
	"github.com/kvp2p/kvp2p/internal/workload"
)

// node is one rank incarnation as a workload.Node: each call is one Step
// on its sidecar (the workload engine wants a verdict per lookup at once,
// and a Step answers lookups in its response), block bytes go straight
// into the region file.
type node struct {
	r  *run
	rk *rank
	e  *engine // the incarnation
}

func (n node) Status() workload.Status {
	switch {
	case n.rk.stalled:
		return workload.Paused
	case n.rk.eng != n.e || n.e.dead.Load():
		return workload.Gone
	}
	return workload.Up
}

func (n node) NewRequest(id string, p loads.TransferParams) error {
	if _, ok := n.r.issued[id]; n.rk.consumer && !ok {
		n.r.issued[id] = n.r.now()
		if p.RemoteKVSource != nil {
			n.r.sym[id] = true
		}
	}
	if d := p.RemoteDecoder; d != nil && d.RemoteHost == "" {
		// The workload names no decoder address (the in-process Manager
		// needs none); the engine API wants the one vLLM's router gives:
		// the consumer rank's, which the request id starts with.
		cons, _, _ := strings.Cut(id, "#")
		rk := n.r.byID[cons]
		if rk == nil {
			return fmt.Errorf("PD store of %q: no consumer rank %q", id, cons)
		}
		dd := *d
		dd.RemoteHost, dd.RemotePort = rk.addr, rk.port
		p.RemoteDecoder = &dd
	}
	_, err := n.e.step(&pb.StepRequest{NewRequests: []*pb.NewRequest{{ReqId: id, Params: pbParams(p)}}})
	return err
}

func pbParams(p loads.TransferParams) *pb.TransferParams {
	conv := func(r *loads.Remote) *pb.Remote {
		if r == nil {
			return nil
		}
		return &pb.Remote{Host: r.RemoteHost, Port: uint32(r.RemotePort), Domain: r.RemoteDomain, KvRequestId: r.KVRequestID}
	}
	return &pb.TransferParams{RemotePrefiller: conv(p.RemotePrefiller), RemoteDecoder: conv(p.RemoteDecoder), RemoteKvSource: conv(p.RemoteKVSource)}
}

// Lookup answers one key. The workload asks a symmetric request's keys
// one at a time, in order, every step; vLLM asks them in one call. So
// the first key's Lookup asks the sidecar for all of the request's keys
// in one Step and the rest are answered from that: one engine call per
// request and step, not one per key (sixteen Step round trips a step for
// every waiting request made the driver late on a loaded machine, and its
// lateness went into every time-to-fallback).
func (n node) Lookup(id string, k wire.Key) session.Verdict {
	e := n.e
	if v, ok := e.memo.take(id, k); ok {
		return v
	}
	keys := n.r.symKeys(id, k)
	raw := make([][]byte, len(keys))
	for i := range keys {
		raw[i] = keys[i][:]
	}
	resp, err := e.step(&pb.StepRequest{Lookups: []*pb.LookupBatch{{ReqId: id, Keys: raw}}})
	if err != nil || len(resp.Lookups) != 1 || len(resp.Lookups[0].Verdicts) != len(keys) {
		return session.Miss // the engine prefills: what vLLM does when its connector errs
	}
	vs := make([]session.Verdict, len(keys))
	for i, v := range resp.Lookups[0].Verdicts {
		switch v {
		case pb.Verdict_VERDICT_HIT:
			vs[i] = session.Hit
		case pb.Verdict_VERDICT_RETRY:
			vs[i] = session.Retry
		default:
			vs[i] = session.Miss
		}
	}
	e.memo = lookupMemo{id: id, keys: keys, v: vs, next: 1}
	return vs[0]
}

// lookupMemo is the verdicts of a request's keys from one Step, handed
// out to the key-by-key Lookups that follow it in the same step.
type lookupMemo struct {
	id   string
	keys []wire.Key
	v    []session.Verdict
	next int
}

// take answers k if it is the next key of the memo's request.
func (m *lookupMemo) take(id string, k wire.Key) (session.Verdict, bool) {
	if m.id != id || m.next >= len(m.keys) || m.keys[m.next] != k {
		*m = lookupMemo{}
		return 0, false
	}
	v := m.v[m.next]
	if m.next++; m.next == len(m.keys) {
		*m = lookupMemo{}
	}
	return v, true
}

// symKeys is every key of request id if k is its first key and the
// request is a symmetric one (its keys follow workload.Key), else just k.
func (r *run) symKeys(id string, k wire.Key) []wire.Key {
	cons, seqS, _ := strings.Cut(id, "#")
	seq, err := strconv.Atoi(seqS)
	c := slices.IndexFunc(r.cons, func(rk *rank) bool { return rk.id == cons })
	if err != nil || c < 0 || !r.sym[id] {
		return []wire.Key{k}
	}
	seed := uint64(r.sc.Seed)
	if workload.Key(seed, c, seq, 0) != k {
		return []wire.Key{k}
	}
	keys := make([]wire.Key, r.sc.Workload.Blocks)
	for i := range keys {
		keys[i] = workload.Key(seed, c, seq, i)
	}
	return keys
}

func (n node) EndStep() { _, _ = n.e.step(&pb.StepRequest{EndStep: true}) }

// errFull: no free chunk for a load; the request prefills locally.
var errFull = errors.New("no free chunk in the engine's region")

func (n node) SubmitLoad(id string, keys []wire.Key) (uint64, error) {
	e := n.e
	e.mu.Lock()
	chunks := make([]uint32, 0, len(keys))
	for range keys {
		c, ok := e.alloc()
		if !ok {
			e.full++
			e.unrefNew(chunks)
			e.mu.Unlock()
			return 0, errFull
		}
		e.ref[c]++
		chunks = append(chunks, c)
	}
	e.nextJob++
	jid := e.nextJob
	e.jobs[jid] = &ejob{kind: pb.JobKind_JOB_KIND_LOAD, req: id, keys: keys, chunks: chunks}
	e.loadOf[id] = jid
	e.mu.Unlock()
	_, err := e.step(&pb.StepRequest{Loads: []*pb.Job{pbJob(jid, id, keys, chunks)}})
	if err != nil {
		e.mu.Lock()
		if e.jobs[jid] != nil {
			delete(e.jobs, jid)
			delete(e.loadOf, id)
			e.unref(chunks)
		}
		e.mu.Unlock()
		return 0, err
	}
	return jid, nil
}

// unrefNew gives back chunks just allocated; e.mu held.
func (e *engine) unrefNew(cs []uint32) { e.unref(cs) }

func pbJob(id uint64, req string, keys []wire.Key, chunks []uint32) *pb.Job {
	j := &pb.Job{JobId: id, ReqId: req, ChunkIds: chunks, Keys: make([][]byte, len(keys))}
	for i := range keys {
		j.Keys[i] = keys[i][:]
	}
	return j
}

// SubmitStore stores the blocks of keys the engine holds (PutBlocks left
// out those that did not fit: the decoder's fetch of them fails, as it
// would in vLLM).
func (n node) SubmitStore(id string, keys []wire.Key) {
	e := n.e
	e.mu.Lock()
	var ks []wire.Key
	var cs []uint32
	for _, k := range keys {
		if c, ok := e.held[k]; ok {
			ks, cs = append(ks, k), append(cs, c)
			e.ref[c]++
		}
	}
	e.nextJob++
	jid := e.nextJob
	e.jobs[jid] = &ejob{kind: pb.JobKind_JOB_KIND_STORE, req: id, keys: ks, chunks: cs}
	e.mu.Unlock()
	if _, err := e.step(&pb.StepRequest{Stores: []*pb.Job{pbJob(jid, id, ks, cs)}}); err != nil {
		e.mu.Lock()
		if e.jobs[jid] != nil {
			delete(e.jobs, jid)
			e.unref(cs)
		}
		e.mu.Unlock()
	}
}

// RequestFinished ends the request on the sidecar; the engine drops the
// blocks a hit loaded (after Verify read them), so the region's touched
// memory stays what is in flight.
func (n node) RequestFinished(id string) {
	_, _ = n.e.step(&pb.StepRequest{Finished: []string{id}})
	n.e.mu.Lock()
	for _, k := range n.e.hits[id] {
		n.e.uncache(k)
	}
	delete(n.e.hits, id)
	n.e.mu.Unlock()
}

// PutBlocks writes the blocks into free chunks, as the engine computed
// them; a block that does not fit is left out.
func (n node) PutBlocks(keys []wire.Key) {
	e := n.e
	for _, k := range keys {
		e.mu.Lock()
		_, have := e.held[k]
		var c uint32
		ok := false
		if !have {
			if c, ok = e.alloc(); ok {
				e.ref[c]++ // nobody may take it while it is written
			}
		}
		e.mu.Unlock()
		if !ok {
			continue
		}
		_, err := e.region.WriteAt(n.r.content(k), int64(c)*int64(e.block))
		e.mu.Lock()
		if err == nil {
			e.cache(k, c)
		}
		e.unref([]uint32{c})
		e.mu.Unlock()
	}
}

// Verify reads the loaded blocks back from the region and compares them
// byte for byte with what the source wrote.
func (n node) Verify(keys []wire.Key) bool {
	e := n.e
	for _, k := range keys {
		e.mu.Lock()
		c, ok := e.held[k]
		e.mu.Unlock()
		if !ok {
			return false
		}
		if _, err := e.region.ReadAt(n.r.got, int64(c)*int64(e.block)); err != nil {
			return false
		}
		if !bytes.Equal(n.r.got, n.r.content(k)) {
			return false
		}
	}
	return true
}

func (n node) Flush() {}

// Poll steps the sidecar once to collect what finished, then hands the
// load results over.
func (n node) Poll() []loads.JobResult {
	if n.e.dead.Load() {
		n.e.sidecarGone()
	} else {
		_, _ = n.e.step(&pb.StepRequest{})
	}
	return n.e.takeResults()
}

func (n node) Busy(bool) {}

// content is the bytes of block k, what the source writes and the
// consumer must find (the demo's pattern): the key repeated, the offset
// stamped every 4 KiB so that a misplaced chunk shows. The result is
// scratch, valid until the next call.
func (r *run) content(k wire.Key) []byte {
	b := r.want
	m := min(len(b), 64)
	for i := range m {
		b[i] = k[i%len(k)] ^ byte(i*7)
	}
	for filled := m; filled < len(b); filled *= 2 {
		copy(b[filled:], b[:filled])
	}
	for off := 0; off+8 <= len(b); off += 4096 {
		binary.LittleEndian.PutUint32(b[off:], uint32(off))
		b[off+4] ^= k[0]
	}
	return b
}
