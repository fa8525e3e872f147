package sidecar

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	pb "github.com/kvp2p/kvp2p/internal/engineapi/enginepb"
	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/store"
	"github.com/kvp2p/kvp2p/internal/wire"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Two sidecars, two regions: A's engine stores blocks, B's engine finds
// them with a symmetric lookup (RETRY, then HIT), loads them into its own
// chunks, and the bytes in B's region equal A's.
func TestEngineSymmetricLoad(t *testing.T) {
	a, b := startSidecar(t, nil), startSidecar(t, nil)
	ea, eb := attach(t, a), attach(t, b)
	keys := []wire.Key{nodetest.Key("sym", 0), nodetest.Key("sym", 1), nodetest.Key("sym", 2)}
	ea.store(a, "prod", nil, keys, 3, 7, 11)
	// Once stored, the chunks are the engine's again: a peer's lookup is
	// answered through a ServeAsk to A's engine.
	if st := storeStats(t, a); st.Pinned != 0 || st.Filling != 0 {
		t.Fatalf("A's store still holds chunks after its result: %+v", st)
	}

	params := &pb.TransferParams{RemoteKvSource: remoteOf(t, a), KvRequestId: "kv-sym"}
	eb.mustStep(&pb.StepRequest{NewRequests: []*pb.NewRequest{{ReqId: "cons", Params: params}}})
	for _, k := range keys {
		seen := eb.lookUntil("cons", k)
		if seen[0] != pb.Verdict_VERDICT_RETRY || seen[len(seen)-1] != pb.Verdict_VERDICT_HIT {
			t.Fatalf("verdicts %v, want RETRY ... HIT", seen)
		}
	}
	j := eb.job("cons", keys, 0, 1, 2)
	d := eb.waitJob(j.JobId, eb.mustStep(&pb.StepRequest{Loads: []*pb.Job{j}, EndStep: true}))
	if !d.Success || len(d.Successful) != 3 || d.Bytes != 3*nodetest.BlockBytes {
		t.Fatalf("load: %+v", d)
	}
	for i, k := range keys {
		if got := readChunk(t, b, uint32(i)); !bytes.Equal(got, nodetest.Bytes(k)) {
			t.Fatalf("chunk %d in B's region differs from A's block", i)
		}
	}
	// A's pins come back once the peer is done with them.
	nodetest.WaitFor(t, func() bool {
		ea.mu.Lock()
		defer ea.mu.Unlock()
		return len(ea.pins) == 0 && ea.released > 0
	})
	// B's chunks are B's engine's again: it can give them to a new load.
	if st := storeStats(t, b); st.Filling != 0 || st.Pinned != 0 {
		t.Fatalf("B's loaded chunks still held: %+v", st)
	}
	// A key A's engine does not hold answers MISS.
	if seen := eb.lookUntil("cons", nodetest.Key("sym", 99)); seen[len(seen)-1] != pb.Verdict_VERDICT_MISS {
		t.Fatalf("unknown key: %v", seen)
	}
}

// PD, both orders: the decoder's load is a HIT at once, and finds the
// prefiller's blocks whether they were stored before or after it asked.
func TestEnginePD(t *testing.T) {
	for _, storeFirst := range []bool{true, false} {
		name := map[bool]string{true: "store then fetch", false: "fetch then store"}[storeFirst]
		t.Run(name, func(t *testing.T) {
			p, d := startSidecar(t, nil), startSidecar(t, nil)
			ep, ed := attach(t, p), attach(t, d)
			keys := []wire.Key{nodetest.Key(name, 0), nodetest.Key(name, 1)}
			prod := &pb.TransferParams{RemoteDecoder: remoteOf(t, d), KvRequestId: "kv-pd"}
			cons := &pb.TransferParams{RemotePrefiller: remoteOf(t, p), KvRequestId: "kv-pd"}
			var sj uint64
			var sresp *pb.StepResponse
			ep.write(p, keys, 5, 6)
			if storeFirst {
				sj, sresp = ep.submitStore("pre", prod, keys, 5, 6)
			}
			ed.mustStep(&pb.StepRequest{NewRequests: []*pb.NewRequest{{ReqId: "dec", Params: cons}}})
			// No probe in PD: HIT as soon as the session to the prefiller
			// is up (RETRY while its handshake is pending).
			for _, k := range keys {
				if seen := ed.lookUntil("dec", k); seen[len(seen)-1] != pb.Verdict_VERDICT_HIT {
					t.Fatalf("PD lookup %v, want HIT", seen)
				}
			}
			j := ed.job("dec", keys, 9, 10)
			resp := ed.mustStep(&pb.StepRequest{Loads: []*pb.Job{j}, EndStep: true})
			if !storeFirst {
				sj, sresp = ep.submitStore("pre", prod, keys, 5, 6)
			}
			if done := ed.waitJob(j.JobId, resp); !done.Success {
				t.Fatalf("PD load failed: %s", done.Reason)
			}
			if done := ep.waitJob(sj, sresp); !done.Success {
				t.Fatalf("PD store failed: %s", done.Reason)
			}
			if st := storeStats(t, p); st.Pinned != 0 {
				t.Fatalf("prefiller's chunks still pinned after the fetch: %+v", st)
			}
			for i, k := range keys {
				if !bytes.Equal(readChunk(t, d, uint32(9+i)), nodetest.Bytes(k)) {
					t.Fatalf("chunk %d differs", 9+i)
				}
			}
		})
	}
}

// Every bad call answers a clear status and changes nothing: the same good
// step succeeds afterwards, and the store is as it was.
func TestEngineBadCalls(t *testing.T) {
	// The watchdog is off so that the load below stays in flight however
	// slowly the test runs.
	s := startSidecar(t, func(c *sidecarConfig) { c.Engine.MaxJobs = 3; c.Timers.StallTimeout = -1 })
	e := attach(t, s)
	k := nodetest.Key("bad", 0)
	// A load in flight that does not finish (its PD producer never stores)
	// holds chunk 4 and job id 1.
	p := nodetest.Start(t, newProducer)
	pr, pport := nodetest.SplitPeer(t, p.PeerID())
	cons := &pb.TransferParams{RemotePrefiller: &pb.Remote{Host: pr, Port: uint32(pport)}, KvRequestId: "x"}
	e.mustStep(&pb.StepRequest{NewRequests: []*pb.NewRequest{{ReqId: "r", Params: cons}}})
	if seen := e.lookUntil("r", k); seen[len(seen)-1] != pb.Verdict_VERDICT_HIT {
		t.Fatalf("PD lookup: %v", seen)
	}
	busy := e.job("r", []wire.Key{k}, 4)
	e.mustStep(&pb.StepRequest{Loads: []*pb.Job{busy}})
	before := storeStats(t, s)
	if before.Filling != 1 {
		t.Fatalf("the busy load does not hold its chunk: %+v", before)
	}

	load := func(chunk uint32, req string) *pb.Job {
		return &pb.Job{JobId: 50, ReqId: req, Keys: [][]byte{k[:]}, ChunkIds: []uint32{chunk}}
	}
	storeJob := func(chunk uint32, key wire.Key) *pb.Job {
		return &pb.Job{JobId: 51, ReqId: "r", Keys: [][]byte{key[:]}, ChunkIds: []uint32{chunk}}
	}
	many := []*pb.Job{load(1, "r"), load(2, "r"), load(3, "r")}
	many[1].JobId, many[2].JobId = 60, 61
	for _, tc := range []struct {
		name string
		req  *pb.StepRequest
		reg  uint64 // 0: the engine's own
		want codes.Code
	}{
		{"stale registration", &pb.StepRequest{Loads: []*pb.Job{load(1, "r")}}, e.reg + 1, codes.FailedPrecondition},
		{"job id in flight", &pb.StepRequest{Loads: []*pb.Job{{JobId: busy.JobId, ReqId: "r", Keys: [][]byte{k[:]}, ChunkIds: []uint32{1}}}}, 0, codes.InvalidArgument},
		{"chunk out of range", &pb.StepRequest{Loads: []*pb.Job{load(engChunks, "r")}}, 0, codes.InvalidArgument},
		{"chunk of a load in flight", &pb.StepRequest{Loads: []*pb.Job{load(4, "r")}}, 0, codes.FailedPrecondition},
		{"store into a loading chunk", &pb.StepRequest{Stores: []*pb.Job{storeJob(4, k)}}, 0, codes.FailedPrecondition},
		{"unknown request", &pb.StepRequest{Loads: []*pb.Job{load(1, "nobody")}}, 0, codes.InvalidArgument},
		// Ends are applied first: the job would reach a forgotten request.
		{"job of a request finished in the step", &pb.StepRequest{Loads: []*pb.Job{load(1, "r")}, Finished: []string{"r"}}, 0, codes.InvalidArgument},
		{"store of a request preempted in the step", &pb.StepRequest{Stores: []*pb.Job{storeJob(1, k)}, Preempted: []string{"r"}}, 0, codes.InvalidArgument},
		{"malformed key", &pb.StepRequest{Lookups: []*pb.LookupBatch{{ReqId: "r", Keys: [][]byte{k[:15]}}}}, 0, codes.InvalidArgument},
		{"too many jobs", &pb.StepRequest{Loads: many}, 0, codes.ResourceExhausted},
		// A good job next to a bad one: neither is applied.
		{"all or nothing", &pb.StepRequest{Loads: []*pb.Job{load(1, "r")}, Stores: []*pb.Job{storeJob(4, k)}}, 0, codes.FailedPrecondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.Registration = e.reg
			if tc.reg != 0 {
				tc.req.Registration = tc.reg
			}
			_, err := e.c.Step(t.Context(), tc.req)
			if status.Code(err) != tc.want {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if after := storeStats(t, s); after != before {
				t.Fatalf("store changed: %+v -> %+v", before, after)
			}
		})
	}
	// Nothing was applied: chunk 1 and job 50 are still free to use.
	if st := chunkState(t, s, store.Slot(1)); st != store.StateFree {
		t.Fatalf("chunk 1 is %v after refused steps", st)
	}
	e.mustStep(&pb.StepRequest{Loads: []*pb.Job{load(1, "r")}})

	// Packed keys work as well as a list of keys.
	packed := &pb.StepRequest{Lookups: []*pb.LookupBatch{{ReqId: "r", KeysPacked: append(bytes.Clone(k[:]), k[:]...)}}}
	if resp := e.mustStep(packed); len(resp.Lookups[0].Verdicts) != 2 {
		t.Fatalf("packed lookup: %v", resp.Lookups)
	}
	// Packed verdicts: the same answers, one byte each.
	packed.Lookups[0].PackedVerdicts = true
	want := e.mustStep(&pb.StepRequest{Lookups: []*pb.LookupBatch{{ReqId: "r", Keys: [][]byte{k[:], k[:]}}}}).Lookups[0].Verdicts
	if a := e.mustStep(packed).Lookups[0]; len(a.Verdicts) != 0 || len(a.VerdictsPacked) != 2 ||
		pb.Verdict(a.VerdictsPacked[0]) != want[0] || pb.Verdict(a.VerdictsPacked[1]) != want[1] {
		t.Fatalf("packed verdicts %v, want %v", a, want)
	}

	// Registration refusals.
	if _, err := tryAttach(t, s, engChunks, nodetest.BlockBytes, s.region); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("second engine: %v, want AlreadyExists", err)
	}
	other := startSidecar(t, nil)
	if _, err := tryAttach(t, other, engChunks*2, nodetest.BlockBytes, other.region); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("wrong geometry: %v, want FailedPrecondition", err)
	}
	outside := filepath.Join(t.TempDir(), "elsewhere.mmap")
	if err := os.WriteFile(outside, make([]byte, engChunks*nodetest.BlockBytes), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := tryAttach(t, other, engChunks, nodetest.BlockBytes, outside); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("region outside region_dir: %v, want FailedPrecondition", err)
	}
	seeded := &pb.Register{ApiVersion: pb.ApiVersion_API_VERSION_1, RegionPath: other.region, NumChunks: engChunks, RowStride: nodetest.BlockBytes, HashSeed: "other"}
	if _, err := tryRegister(t, other, seeded); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("hash seed mismatch: %v, want FailedPrecondition", err)
	}
	short := filepath.Join(other.dir, "short.mmap")
	if err := os.WriteFile(short, make([]byte, nodetest.BlockBytes), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := tryAttach(t, other, engChunks, nodetest.BlockBytes, short); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("region too small: %v, want FailedPrecondition", err)
	}
	seeded.HashSeed = "s" // the sidecar's
	if _, err := tryRegister(t, other, seeded); err != nil {
		t.Fatalf("matching hash seed: %v", err)
	}
}

// A consumer's engine with a load in flight dies: the sidecar aborts the
// load, fences its chunk until no write can land, forgets the registration
// and accepts a restarted engine, which gets the chunk back.
func TestEngineDeathAbortsAndReregisters(t *testing.T) {
	p := nodetest.Start(t, newProducer)
	s := startSidecar(t, func(c *sidecarConfig) { c.Timers.StallTimeout = -1 })
	e := attach(t, s)
	k := nodetest.Key("death", 0)
	host, port := nodetest.SplitPeer(t, p.PeerID())
	cons := &pb.TransferParams{RemotePrefiller: &pb.Remote{Host: host, Port: uint32(port)}, KvRequestId: "never-stored"}
	e.mustStep(&pb.StepRequest{NewRequests: []*pb.NewRequest{{ReqId: "r", Params: cons}}})
	e.lookUntil("r", k)
	e.mustStep(&pb.StepRequest{Loads: []*pb.Job{e.job("r", []wire.Key{k}, 4)}})
	if st := chunkState(t, s, store.Slot(4)); st != store.StateFilling {
		t.Fatalf("chunk 4 is %v, want filling", st)
	}
	old := e.reg
	e.detach()
	// The load is aborted; once the producer acknowledges, the chunk is free.
	nodetest.WaitFor(t, func() bool { return chunkState(t, s, store.Slot(4)) == store.StateFree })
	// The engine may reuse chunk 4 at once: a peer's chunk still arriving
	// for the aborted load (written as the data path does, through Slot)
	// must not reach the engine's region.
	before := readChunk(t, s, 4)
	copy(s.node.Slot(4), bytes.Repeat([]byte{0xee}, nodetest.BlockBytes))
	if !bytes.Equal(readChunk(t, s, 4), before) {
		t.Fatal("a write after the engine's death reached its region")
	}
	// The session the dead engine's request opened ends too: nobody uses it.
	// The table lets a session go once its data path has closed.
	nodetest.WaitFor(t, func() bool {
		var sessions int
		_ = s.node.Do(func(now time.Time) { sessions = len(s.node.Table().View(now).Sessions) })
		return sessions == 0
	})
	var e2 *fakeEngine
	nodetest.WaitFor(t, func() bool {
		var err error
		e2, err = tryAttach(t, s, engChunks, nodetest.BlockBytes, s.region)
		return err == nil
	})
	if e2.reg == old {
		t.Fatal("a restarted engine got the old registration")
	}
	if _, err := e.c.Step(t.Context(), &pb.StepRequest{Registration: old}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("step with the dead engine's registration: %v", err)
	}
	// The dead engine's requests are gone; the new engine starts afresh and
	// may give chunk 4 to a load of its own.
	e2.mustStep(&pb.StepRequest{NewRequests: []*pb.NewRequest{{ReqId: "r", Params: cons}}})
	e2.lookUntil("r", k)
	e2.mustStep(&pb.StepRequest{Loads: []*pb.Job{e2.job("r", []wire.Key{k}, 4)}})
}

// The source's sidecar dies with a load in flight: the consumer's job fails,
// its request is reported failed, its keys answer MISS, and the consumer
// goes on (its chunks are its engine's again).
func TestEngineSourceSidecarDies(t *testing.T) {
	a, b := startSidecar(t, nil), startSidecar(t, nil)
	attach(t, a)
	eb := attach(t, b)
	keys := []wire.Key{nodetest.Key("die", 0), nodetest.Key("die", 1)}
	cons := &pb.TransferParams{RemotePrefiller: remoteOf(t, a), KvRequestId: "kv-die"}
	eb.mustStep(&pb.StepRequest{NewRequests: []*pb.NewRequest{{ReqId: "dec", Params: cons}}})
	eb.lookUntil("dec", keys[0])
	j := eb.job("dec", keys, 2, 3)
	resp := eb.mustStep(&pb.StepRequest{Loads: []*pb.Job{j}, EndStep: true})
	a.stop() // the producer never stored: the load is in flight
	d := eb.waitJob(j.JobId, resp)
	if d.Success || len(d.Successful) != 0 {
		t.Fatalf("load from a dead sidecar: %+v", d)
	}
	for _, c := range []store.Slot{2, 3} {
		if st := chunkState(t, b, c); st != store.StateFree {
			t.Fatalf("chunk %d is %v after the failed load was reported", c, st)
		}
	}
	if v := eb.lookUntil("dec", keys[1]); v[len(v)-1] != pb.Verdict_VERDICT_MISS {
		t.Fatalf("key of a failed request: %v, want MISS", v)
	}
	// A new request to the dead source falls back too.
	eb.mustStep(&pb.StepRequest{NewRequests: []*pb.NewRequest{{ReqId: "next", Params: &pb.TransferParams{RemoteKvSource: remoteOf(t, a)}}}})
	if v := eb.lookUntil("next", keys[0]); v[len(v)-1] != pb.Verdict_VERDICT_MISS {
		t.Fatalf("lookup at a dead source: %v, want MISS", v)
	}
}
