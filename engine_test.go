package kvp2p

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	pb "github.com/kvp2p/kvp2p/internal/engineapi/enginepb"
	"github.com/kvp2p/kvp2p/internal/store"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Two sidecars, two regions: A's engine stores blocks, B's engine finds
// them with a symmetric lookup (RETRY, then HIT), loads them into its own
// chunks, and the bytes in B's region equal A's.
func TestEngineSymmetricLoad(t *testing.T) {
	a, b := startSidecar(t, nil), startSidecar(t, nil)
	ea, eb := attach(t, a), attach(t, b)
	keys := []Key{testKey("sym", 0), testKey("sym", 1), testKey("sym", 2)}
	ea.store(a, "prod", nil, keys, 3, 7, 11)
	// Once stored, the chunks are the engine's again: a peer's lookup is
	// answered through a ServeAsk to A's engine.
	if st := a.node.st.Stats(); st.Pinned != 0 || st.Filling != 0 {
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
	if !d.Success || len(d.Successful) != 3 || d.Bytes != 3*testBlock {
		t.Fatalf("load: %+v", d)
	}
	for i, k := range keys {
		if got := readChunk(t, b.region, uint32(i)); !bytes.Equal(got, testBytes(k)) {
			t.Fatalf("chunk %d in B's region differs from A's block", i)
		}
	}
	// A's pins come back once the peer is done with them.
	waitFor(t, func() bool {
		ea.mu.Lock()
		defer ea.mu.Unlock()
		return len(ea.pins) == 0 && ea.released > 0
	})
	// B's chunks are B's engine's again: it can give them to a new load.
	if st := b.node.st.Stats(); st.Filling != 0 || st.Pinned != 0 {
		t.Fatalf("B's loaded chunks still held: %+v", st)
	}
	// A key A's engine does not hold answers MISS.
	if seen := eb.lookUntil("cons", testKey("sym", 99)); seen[len(seen)-1] != pb.Verdict_VERDICT_MISS {
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
			keys := []Key{testKey(name, 0), testKey(name, 1)}
			prod := &pb.TransferParams{RemoteDecoder: remoteOf(t, d), KvRequestId: "kv-pd"}
			cons := &pb.TransferParams{RemotePrefiller: remoteOf(t, p), KvRequestId: "kv-pd"}
			var sj uint64
			var sresp *pb.StepResponse
			if storeFirst {
				sj, sresp = ep.submitStore(p, "pre", prod, keys, 5, 6)
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
				sj, sresp = ep.submitStore(p, "pre", prod, keys, 5, 6)
			}
			if done := ed.waitJob(j.JobId, resp); !done.Success {
				t.Fatalf("PD load failed: %s", done.Reason)
			}
			if done := ep.waitJob(sj, sresp); !done.Success {
				t.Fatalf("PD store failed: %s", done.Reason)
			}
			if st := p.node.st.Stats(); st.Pinned != 0 {
				t.Fatalf("prefiller's chunks still pinned after the fetch: %+v", st)
			}
			for i, k := range keys {
				if !bytes.Equal(readChunk(t, d.region, uint32(9+i)), testBytes(k)) {
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
	s := startSidecar(t, func(c *Config) { c.Engine.MaxJobs = 3; c.Timers.StallTimeout = -1 })
	e := attach(t, s)
	k := testKey("bad", 0)
	// A load in flight that does not finish (its PD producer never stores)
	// holds chunk 4 and job id 1.
	p := startNode(t, nil)
	pr, pport := hostPort(t, p.PeerID())
	cons := &pb.TransferParams{RemotePrefiller: &pb.Remote{Host: pr, Port: uint32(pport)}, KvRequestId: "x"}
	e.mustStep(&pb.StepRequest{NewRequests: []*pb.NewRequest{{ReqId: "r", Params: cons}}})
	if seen := e.lookUntil("r", k); seen[len(seen)-1] != pb.Verdict_VERDICT_HIT {
		t.Fatalf("PD lookup: %v", seen)
	}
	busy := e.job("r", []Key{k}, 4)
	e.mustStep(&pb.StepRequest{Loads: []*pb.Job{busy}})
	before := s.node.st.Stats()
	if before.Filling != 1 {
		t.Fatalf("the busy load does not hold its chunk: %+v", before)
	}

	load := func(chunk uint32, req string) *pb.Job {
		return &pb.Job{JobId: 50, ReqId: req, Keys: [][]byte{k[:]}, ChunkIds: []uint32{chunk}}
	}
	storeJob := func(chunk uint32, key Key) *pb.Job {
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
			if after := s.node.st.Stats(); after != before {
				t.Fatalf("store changed: %+v -> %+v", before, after)
			}
		})
	}
	// Nothing was applied: chunk 1 and job 50 are still free to use.
	if st := s.node.st.State(store.Slot(1)); st != store.StateFree {
		t.Fatalf("chunk 1 is %v after refused steps", st)
	}
	e.mustStep(&pb.StepRequest{Loads: []*pb.Job{load(1, "r")}})

	// Registration refusals.
	if _, err := tryAttach(t, s, engChunks, testBlock, s.region); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("second engine: %v, want AlreadyExists", err)
	}
	other := startSidecar(t, nil)
	if _, err := tryAttach(t, other, engChunks*2, testBlock, other.region); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("wrong geometry: %v, want FailedPrecondition", err)
	}
	outside := filepath.Join(t.TempDir(), "elsewhere.mmap")
	if err := os.WriteFile(outside, make([]byte, engChunks*testBlock), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := tryAttach(t, other, engChunks, testBlock, outside); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("region outside region_dir: %v, want FailedPrecondition", err)
	}
	short := filepath.Join(other.dir, "short.mmap")
	if err := os.WriteFile(short, make([]byte, testBlock), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := tryAttach(t, other, engChunks, testBlock, short); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("region too small: %v, want FailedPrecondition", err)
	}
}
