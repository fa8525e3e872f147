package sidecar

import (
	"bytes"
	"testing"

	pb "github.com/kvp2p/kvp2p/internal/engineapi/enginepb"
	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/store"
	"github.com/kvp2p/kvp2p/internal/wire"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Chunk ownership at the edges (found in review): a store's chunk a peer
// still reads, a pin id granted twice, a dead engine's parked store, and
// the order of the first messages on Attach.

// A PD store ends while a symmetric peer's lookup still pins its chunk: the
// engine hears of the store only once no peer reads the chunk, and no later
// reader finds it.
func TestEngineStoreDoneWaitsForReaders(t *testing.T) {
	p, d, s := startSidecar(t, nil), startSidecar(t, nil), startSidecar(t, nil)
	ep, ed, es := attach(t, p), attach(t, d), attach(t, s)
	k := nodetest.Key("owner", 0)
	prod := &pb.TransferParams{RemoteDecoder: remoteOf(t, d), KvRequestId: "kv-o1"}
	cons := &pb.TransferParams{RemotePrefiller: remoteOf(t, p), KvRequestId: "kv-o1"}
	ep.write(p, []wire.Key{k}, 5)
	sj, sresp := ep.submitStore("pre", prod, []wire.Key{k}, 5) // parked for the decoder
	// A symmetric peer finds the parked block: its lookup pins chunk 5.
	es.mustStep(&pb.StepRequest{NewRequests: []*pb.NewRequest{{ReqId: "sym", Params: &pb.TransferParams{RemoteKvSource: remoteOf(t, p), KvRequestId: "kv-sym"}}}})
	if v := es.lookUntil("sym", k); v[len(v)-1] != pb.Verdict_VERDICT_HIT {
		t.Fatalf("symmetric lookup: %v", v)
	}
	// The decoder fetches it: the store is done for kvp2p.
	ed.mustStep(&pb.StepRequest{NewRequests: []*pb.NewRequest{{ReqId: "dec", Params: cons}}})
	ed.lookUntil("dec", k)
	j := ed.job("dec", []wire.Key{k}, 9)
	if done := ed.waitJob(j.JobId, ed.mustStep(&pb.StepRequest{Loads: []*pb.Job{j}, EndStep: true})); !done.Success {
		t.Fatalf("PD load: %s", done.Reason)
	}
	// While the symmetric peer's pin holds, P's engine does not get the
	// store's result: the chunk is not its to reuse yet.
	resp := ep.mustStep(&pb.StepRequest{})
	for _, done := range append(sresp.Finished, resp.Finished...) {
		if done.JobId == sj {
			t.Fatal("the store was reported done while a peer's lookup still pins its chunk")
		}
	}
	sresp = resp
	// The symmetric peer loads: it gets the right bytes, and then its pin
	// ends and the store is reported.
	lj := es.job("sym", []wire.Key{k}, 0)
	if done := es.waitJob(lj.JobId, es.mustStep(&pb.StepRequest{Loads: []*pb.Job{lj}, EndStep: true})); !done.Success {
		t.Fatalf("symmetric load: %s", done.Reason)
	}
	if !bytes.Equal(readChunk(t, s, 0), nodetest.Bytes(k)) {
		t.Fatal("the symmetric peer loaded other bytes")
	}
	es.mustStep(&pb.StepRequest{Finished: []string{"sym"}})
	if done := ep.waitJob(sj, sresp); !done.Success {
		t.Fatalf("PD store: %s", done.Reason)
	}
	if st := chunkState(t, p, 5); st != store.StateFree {
		t.Fatalf("after the store's result, P's chunk 5 is %v", st)
	}
	// P's engine can give chunk 5 to a load of its own.
	ep.mustStep(&pb.StepRequest{NewRequests: []*pb.NewRequest{{ReqId: "pl", Params: &pb.TransferParams{RemoteKvSource: remoteOf(t, s)}}}})
	if _, err := ep.step(&pb.StepRequest{Loads: []*pb.Job{ep.job("pl", []wire.Key{nodetest.Key("owner", 2)}, 5)}}); status.Code(err) == codes.FailedPrecondition {
		t.Fatalf("P's engine cannot load into its own chunk 5: %v", err)
	}
}

// An engine that grants two asks under one pin id: one release gives both
// back, nothing stays pinned, and a restarted engine can attach.
func TestEngineDuplicatePinID(t *testing.T) {
	a, b := startSidecar(t, nil), startSidecar(t, nil)
	ea, eb := attach(t, a), attach(t, b)
	k1, k2 := nodetest.Key("dup", 1), nodetest.Key("dup", 2)
	ea.write(a, []wire.Key{k1, k2}, 1, 2)
	ea.mu.Lock()
	ea.pinOf = func(uint64) uint64 { return 7 }
	ea.held[k1], ea.held[k2] = 1, 2
	ea.mu.Unlock()
	for i, k := range []wire.Key{k1, k2} {
		req := []string{"c1", "c2"}[i]
		eb.mustStep(&pb.StepRequest{NewRequests: []*pb.NewRequest{{ReqId: req, Params: &pb.TransferParams{RemoteKvSource: remoteOf(t, a), KvRequestId: "kv-" + req}}}})
		if v := eb.lookUntil(req, k); v[len(v)-1] != pb.Verdict_VERDICT_HIT {
			t.Fatalf("lookup %d: %v", i, v)
		}
	}
	eb.mustStep(&pb.StepRequest{Finished: []string{"c1", "c2"}, EndStep: true})
	nodetest.WaitFor(t, func() bool { return storeStats(t, a).Pinned == 0 })
	ea.detach()
	nodetest.WaitFor(t, func() bool {
		_, err := tryAttach(t, a, engChunks, nodetest.BlockBytes, a.region)
		return err == nil
	})
}

// An engine dies with a PD store parked for its decoder: the store fails at
// once, no decoder can fetch the chunk, and a restarted engine attaches
// without waiting for the unbound-store timeout.
func TestEngineDeathWithParkedStore(t *testing.T) {
	p, d := startSidecar(t, nil), startSidecar(t, nil)
	ep := attach(t, p)
	k := nodetest.Key("parked", 0)
	ep.write(p, []wire.Key{k}, 5)
	ep.submitStore("pre", &pb.TransferParams{RemoteDecoder: remoteOf(t, d), KvRequestId: "kv-parked"}, []wire.Key{k}, 5)
	ep.detach()
	nodetest.WaitFor(t, func() bool {
		_, err := tryAttach(t, p, engChunks, nodetest.BlockBytes, p.region)
		return err == nil
	})
	if st := chunkState(t, p, 5); st != store.StateFree {
		t.Fatalf("the dead engine's stored chunk is %v", st)
	}
}

// Registered is the first message on Attach even while peers' lookups
// make the sidecar ask the engine for keys.
func TestEngineRegisteredComesFirst(t *testing.T) {
	a, b := startSidecar(t, nil), startSidecar(t, nil)
	eb := attach(t, b)
	eb.mustStep(&pb.StepRequest{NewRequests: []*pb.NewRequest{{ReqId: "flood", Params: &pb.TransferParams{RemoteKvSource: remoteOf(t, a), KvRequestId: "kv-flood"}}}})
	stop := make(chan struct{})
	flooded := make(chan struct{})
	go func() {
		defer close(flooded)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			var keys [][]byte
			for j := range 32 {
				k := nodetest.Key("flood", i*32+j)
				keys = append(keys, bytes.Clone(k[:]))
			}
			if _, err := eb.step(&pb.StepRequest{Lookups: []*pb.LookupBatch{{ReqId: "flood", Keys: keys}}, EndStep: true}); err != nil {
				return
			}
		}
	}()
	defer func() { close(stop); <-flooded }()
	for range 100 {
		e, err := tryAttach(t, a, engChunks, nodetest.BlockBytes, a.region)
		if err != nil {
			continue // the previous engine's chunks still drain: retry
		}
		if e.reg == 0 {
			t.Fatal("an attach got another message before Registered")
		}
		e.detach()
	}
}
