package sidecar

import (
	"encoding/binary"
	"slices"
	"time"

	"github.com/kvp2p/kvp2p/internal/engineapi"
	pb "github.com/kvp2p/kvp2p/internal/engineapi/enginepb"
	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/node"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/store"
	"github.com/kvp2p/kvp2p/internal/wire"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// step checks a shape-checked step against the node's state, then applies
// it: all of it, or nothing.
func (e *engine) step(n *node.Node, now time.Time, req *pb.StepRequest) (*pb.StepResponse, error) {
	if err := e.checkStep(n, req); err != nil {
		return nil, err
	}
	// Finished and preempted first: a request preempted and scheduled again
	// in one step is registered afresh, not forgotten.
	for _, id := range append(req.Finished, req.Preempted...) {
		if e.reqs[id] {
			delete(e.reqs, id)
			n.Table().RequestFinished(now, id)
		}
	}
	noteStored(n, req.Stored)
	for _, r := range req.NewRequests {
		if err := n.Table().NewRequest(now, r.ReqId, transferParams(r.Params)); err != nil {
			// Registered without a P2P role (its lookups MISS); the engine
			// learns why from the log, and its request goes on locally.
			n.Log().Info("request without a P2P role", "req", r.ReqId, "err", err)
		}
		e.reqs[r.ReqId] = true
	}
	resp := &pb.StepResponse{Lookups: make([]*pb.LookupAnswer, 0, len(req.Lookups))}
	for _, b := range req.Lookups {
		a := &pb.LookupAnswer{ReqId: b.ReqId}
		vs := e.lookup(n, now, b)
		if b.PackedVerdicts {
			a.VerdictsPacked = make([]byte, len(vs))
			for i, v := range vs {
				a.VerdictsPacked[i] = byte(verdict(v))
			}
		} else {
			a.Verdicts = make([]pb.Verdict, len(vs))
			for i, v := range vs {
				a.Verdicts[i] = verdict(v)
			}
		}
		resp.Lookups = append(resp.Lookups, a)
	}
	for _, j := range req.Loads {
		keys, slots := jobKeys(j)
		core := n.Table().SubmitLoadInto(now, j.ReqId, keys, slots)
		e.add(&engJob{id: j.JobId, core: core, kind: pb.JobKind_JOB_KIND_LOAD, req: j.ReqId, keys: len(keys), reg: e.reg, start: now})
	}
	for _, j := range req.Stores {
		keys, slots := jobKeys(j)
		adopted := slots[:0:0]
		for i, sl := range slots {
			if err := n.Store().Adopt(sl, keys[i]); err != nil {
				// Only a store naming one key twice gets here (the first
				// Adopt took the key's index entry): the chunk is not served.
				n.Log().Error("adopting a stored chunk failed", "chunk", sl, "err", err)
				continue
			}
			adopted = append(adopted, sl)
		}
		core := n.Table().SubmitStore(now, j.ReqId, keys)
		e.add(&engJob{id: j.JobId, core: core, kind: pb.JobKind_JOB_KIND_STORE, req: j.ReqId, keys: len(keys), slots: adopted, reg: e.reg, start: now})
	}
	if req.EndStep {
		n.Table().EndStep(now)
	}
	e.collect(n, now)
	resp.Finished, e.done = e.done, nil
	resp.FailedRequests, e.failed = e.failed, nil
	resp.PendingWork = len(e.jobs) > 0 || len(e.grants) > 0 || len(e.asks) > 0
	return resp, nil
}

// lookup answers one batch's keys, in order, in one call to the table
// (loads.Table.LookupBatch); the slice is e's, valid until the next call.
func (e *engine) lookup(n *node.Node, now time.Time, b *pb.LookupBatch) []session.Verdict {
	e.lookKeys = e.lookKeys[:0]
	engineapi.LookupKeys(b, func(k []byte) { e.lookKeys = append(e.lookKeys, wire.Key(k)) })
	e.lookOut = slices.Grow(e.lookOut[:0], len(e.lookKeys))[:len(e.lookKeys)]
	n.Table().LookupBatch(now, b.ReqId, e.lookKeys, e.lookOut)
	return e.lookOut
}

func (e *engine) add(j *engJob) {
	e.jobs[jobKey{j.reg, j.id}] = j
	e.byCore[j.core] = j
}

// checkStep is the state half of a step's validation (engineapi.CheckStep
// did the shape): nothing is applied if it fails.
func (e *engine) checkStep(n *node.Node, req *pb.StepRequest) error {
	if e.reg == 0 || req.Registration != e.reg {
		return status.Errorf(codes.FailedPrecondition, "registration %d is not the attached engine's (%d): attach first", req.Registration, e.reg)
	}
	if open := len(e.jobs) + len(req.Loads) + len(req.Stores); open > e.cfg.MaxJobs {
		return status.Errorf(codes.ResourceExhausted, "%d jobs in flight, at most %d", open, e.cfg.MaxJobs)
	}
	// Finishes and preemptions are applied first (StepRequest's contract):
	// a job of a request that ends in this step, and is not registered
	// again in it, would reach a forgotten request. A store would then
	// serve no one while its PD decoder waits; refuse the step instead.
	ended := make(map[string]bool, len(req.Finished)+len(req.Preempted))
	for _, id := range req.Finished {
		ended[id] = true
	}
	for _, id := range req.Preempted {
		ended[id] = true
	}
	known := func(id string) bool { return e.reqs[id] && !ended[id] }
	fresh := make(map[string]bool, len(req.NewRequests))
	for _, r := range req.NewRequests {
		fresh[r.ReqId] = true
	}
	for what, jobs := range [2][]*pb.Job{req.Loads, req.Stores} {
		for i, j := range jobs {
			if _, dup := e.jobs[jobKey{e.reg, j.JobId}]; dup {
				return status.Errorf(codes.InvalidArgument, "%s[%d]: job_id %d is already in flight", jobWhat[what], i, j.JobId)
			}
			if !known(j.ReqId) && !fresh[j.ReqId] {
				if ended[j.ReqId] {
					return status.Errorf(codes.InvalidArgument, "%s[%d]: request %q ends in this step, and a step's finished and preempted requests are applied before its jobs", jobWhat[what], i, j.ReqId)
				}
				return status.Errorf(codes.InvalidArgument, "%s[%d]: request %q is not registered", jobWhat[what], i, j.ReqId)
			}
			for ci, c := range j.ChunkIds {
				if uint64(c) >= e.geo.NumChunks {
					return status.Errorf(codes.InvalidArgument, "%s[%d]: chunk %d out of range [0,%d)", jobWhat[what], i, c, e.geo.NumChunks)
				}
				sl := store.Slot(c)
				switch st := n.Store().State(sl); {
				case what == 0 && st != store.StateFree:
					return status.Errorf(codes.FailedPrecondition, "loads[%d]: chunk %d is in use (%v)", i, c, st)
				case what == 1 && st == store.StateFilling:
					return status.Errorf(codes.FailedPrecondition, "stores[%d]: chunk %d is being loaded", i, c)
				case what == 1 && st == store.StateReady:
					if k, _ := n.Store().Key(sl); k != wire.Key(j.Keys[ci]) || n.Store().Orphaned(sl) {
						return status.Errorf(codes.FailedPrecondition, "stores[%d]: chunk %d holds another block for kvp2p", i, c)
					}
				}
			}
		}
	}
	if st := req.Stored; st != nil {
		for _, c := range append(st.ChunkIds[:len(st.ChunkIds):len(st.ChunkIds)], st.RemovedChunks...) {
			if uint64(c) >= e.geo.NumChunks {
				return status.Errorf(codes.InvalidArgument, "stored: chunk %d out of range [0,%d)", c, e.geo.NumChunks)
			}
		}
	}
	// Two stores of one step naming one chunk must agree on its key.
	seen := map[uint32]string{}
	for i, j := range req.Stores {
		for ci, c := range j.ChunkIds {
			if k, ok := seen[c]; ok && k != string(j.Keys[ci]) {
				return status.Errorf(codes.InvalidArgument, "stores[%d]: chunk %d named with two keys", i, c)
			}
			seen[c] = string(j.Keys[ci])
		}
	}
	return nil
}

var jobWhat = [2]string{"loads", "stores"}

// noteStored tells the node's summary what the engine's CPU tier now
// holds (StepRequest.stored; checked: chunks in range, one key each). A
// report the summary refuses stops the rest of it: the node counts it
// and logs it at most once a minute.
func noteStored(n *node.Node, st *pb.StoredBlocks) {
	if st == nil {
		return
	}
	for _, c := range st.RemovedChunks {
		n.NoteRemoved(int(c))
	}
	for i, c := range st.ChunkIds {
		if err := n.NoteStored(int(c), wire.Key(st.KeysPacked[i*wire.KeySize:(i+1)*wire.KeySize])); err != nil {
			return // counted and logged (rate-limited) by the node
		}
	}
}

func jobKeys(j *pb.Job) ([]wire.Key, []store.Slot) {
	keys := make([]wire.Key, len(j.Keys))
	slots := make([]store.Slot, len(j.ChunkIds))
	for i := range j.Keys {
		keys[i] = wire.Key(j.Keys[i])
		slots[i] = store.Slot(j.ChunkIds[i])
	}
	return keys, slots
}

func verdict(v session.Verdict) pb.Verdict {
	switch v {
	case session.Hit:
		return pb.Verdict_VERDICT_HIT
	case session.Retry:
		return pb.Verdict_VERDICT_RETRY
	}
	return pb.Verdict_VERDICT_MISS
}

func transferParams(p *pb.TransferParams) loads.TransferParams {
	var tp loads.TransferParams
	if p == nil {
		return tp
	}
	conv := func(r *pb.Remote) *loads.Remote {
		if r == nil {
			return nil
		}
		id := r.KvRequestId
		if id == "" {
			id = p.KvRequestId
		}
		return &loads.Remote{KVRequestID: id, RemoteHost: r.Host, RemotePort: int(r.Port), RemoteDomain: r.Domain}
	}
	tp.RemotePrefiller = conv(p.RemotePrefiller)
	tp.RemoteDecoder = conv(p.RemoteDecoder)
	tp.RemoteKVSource = conv(p.RemoteKvSource)
	return tp
}

// WatchSummaries implements engineapi.SummaryBackend: the node's peer
// summaries, for the attached engine only, as engine API updates.
func (b backend) WatchSummaries(reg uint64, post func(*pb.SummaryUpdate) bool) (func(), error) {
	n, e, ok := b.s.bound()
	if !ok {
		return nil, status.Errorf(codes.FailedPrecondition, "registration %d: no engine is attached: attach first", reg)
	}
	var refuse error
	if err := n.Do(func(time.Time) {
		if e.reg == 0 || e.reg != reg {
			refuse = status.Errorf(codes.FailedPrecondition, "registration %d is not the attached engine's (%d)", reg, e.reg)
		}
	}); err != nil {
		return nil, errNodeClosed
	}
	if refuse != nil {
		return nil, refuse
	}
	stop, err := n.WatchSummaries(func(peer string, m *wire.Summary) bool {
		if e.reg != reg { // in the loop: the engine detached
			post(nil)
			return false
		}
		return post(summaryUpdate(peer, m))
	})
	if err != nil {
		return nil, status.Error(codes.Unimplemented, err.Error())
	}
	return stop, nil
}

// summaryUpdate is m as the engine API carries it; nil m: the peer is gone.
func summaryUpdate(peer string, m *wire.Summary) *pb.SummaryUpdate {
	if m == nil {
		return &pb.SummaryUpdate{Peer: peer, Gone: true}
	}
	u := &pb.SummaryUpdate{Peer: peer, Format: uint32(m.Format), Reset_: m.Reset, Last: m.Last,
		Epoch: m.Epoch, Seq: m.Seq, Size: m.Size, WordsPacked: make([]byte, 0, 12*len(m.Words))}
	for i, w := range m.Words {
		u.WordsPacked = binary.LittleEndian.AppendUint32(u.WordsPacked, w)
		u.WordsPacked = binary.LittleEndian.AppendUint64(u.WordsPacked, m.Values[i])
	}
	return u
}
