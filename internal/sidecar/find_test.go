package sidecar

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/wire"

	pb "github.com/kvp2p/kvp2p/internal/engineapi/enginepb"
	"github.com/kvp2p/kvp2p/internal/node"
	"github.com/kvp2p/kvp2p/internal/summary"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func findOn(peers string) func(*sidecarConfig) {
	return func(c *sidecarConfig) {
		c.Find = node.FindConfig{Enabled: true, Peers: peers, Interval: 50 * time.Millisecond}
	}
}

func storedOf(keys []wire.Key, chunks ...uint32) *pb.StoredBlocks {
	s := &pb.StoredBlocks{ChunkIds: chunks}
	for _, k := range keys {
		s.KeysPacked = append(s.KeysPacked, k[:]...)
	}
	return s
}

// TestEngineFindStored: what an engine reports in StepRequest.stored
// reaches its peers' summaries; C finds A's prefix with no source named,
// and the ordinary symmetric lookup against A then hits. A chunk reported
// again with another key drops the first from A's own summary; a chunk out
// of range is refused with the step.
func TestEngineFindStored(t *testing.T) {
	a := startSidecar(t, findOn(""))
	ea := attach(t, a)
	c := startSidecar(t, findOn(a.node.Config().PeerID))
	ec := attach(t, c)
	keys := []wire.Key{nodetest.Key("found", 0), nodetest.Key("found", 1), nodetest.Key("found", 2)}
	ea.write(a, keys, 5, 6, 7)
	ea.mu.Lock()
	for i, k := range keys {
		ea.held[k] = uint32(5 + i)
	}
	ea.mu.Unlock()
	ea.mustStep(&pb.StepRequest{Stored: storedOf(keys, 5, 6, 7)})

	deadline := time.Now().Add(10 * time.Second)
	for {
		f, ok := c.node.Manager().FindSource(keys, 0)
		if ok && f.Peer == a.node.Config().PeerID && f.Blocks == len(keys) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("C never found A's blocks: %+v %v", f, ok)
		}
		<-time.After(20 * time.Millisecond)
	}
	ec.mustStep(&pb.StepRequest{NewRequests: []*pb.NewRequest{{ReqId: "r", Params: &pb.TransferParams{RemoteKvSource: remoteOf(t, a), KvRequestId: "kv-r"}}}})
	for _, k := range keys {
		if v := ec.lookUntil("r", k); v[len(v)-1] != pb.Verdict_VERDICT_HIT {
			t.Fatalf("lookup at the found source: %v", v)
		}
	}

	other := nodetest.Key("other", 0)
	ea.mustStep(&pb.StepRequest{Stored: storedOf([]wire.Key{other}, 5)})
	if got := a.node.Manager().Prefixes(keys); len(got) != 0 {
		t.Fatalf("A still summarises the replaced key: %+v", got)
	}
	if got := a.node.Manager().Prefixes(keys[1:]); len(got) == 0 || got[0].Blocks != 2 {
		t.Fatalf("A's own prefix of the keys it still holds: %+v", got)
	}
	if _, err := ea.step(&pb.StepRequest{Stored: storedOf([]wire.Key{other}, engChunks)}); err == nil {
		t.Fatal("a stored chunk out of range was accepted")
	}
	if _, err := ea.step(&pb.StepRequest{Stored: &pb.StoredBlocks{KeysPacked: []byte{1}, ChunkIds: []uint32{1}}}); err == nil {
		t.Fatal("stored keys of the wrong length were accepted")
	}
}

// TestEngineWatchSummaries: an engine that watches gets a snapshot of its
// peers' summaries, then their updates, in which the keys a peer stored
// test present (summary.Has, as the plugin computes it); a stream
// for another registration is refused, and detaching ends it.
func TestEngineWatchSummaries(t *testing.T) {
	a := startSidecar(t, findOn(""))
	ea := attach(t, a)
	c := startSidecar(t, findOn(a.node.Config().PeerID))
	ec := attach(t, c)
	early := []wire.Key{nodetest.Key("early", 0)}
	ea.mustStep(&pb.StepRequest{Stored: storedOf(early, 1)})
	peerA := a.node.Config().PeerID
	// Wait until C holds A's summary, so the watch starts with a snapshot.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if f, ok := c.node.Manager().FindSource(early, 0); ok && f.Peer == peerA {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("C never got A's summary")
		}
		<-time.After(20 * time.Millisecond)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if _, err := recvOne(ctx, ec, ec.reg+1); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a watch for another registration: %v", err)
	}
	st, err := ec.c.WatchSummaries(ctx, &pb.WatchSummariesRequest{Registration: ec.reg})
	if err != nil {
		t.Fatal(err)
	}
	var words []uint64
	apply := func(u *pb.SummaryUpdate) {
		if u.Peer != peerA || u.Gone {
			t.Fatalf("update %+v", u)
		}
		if u.Reset_ {
			words = make([]uint64, u.Size)
		}
		if words == nil {
			t.Fatalf("a delta before the snapshot: %+v", u)
		}
		for p := u.WordsPacked; len(p) >= 12; p = p[12:] {
			words[binary.LittleEndian.Uint32(p)] = binary.LittleEndian.Uint64(p[4:])
		}
	}
	has := func(k wire.Key) bool { return summary.Has(words, k) }
	first, err := st.Recv()
	if err != nil || !first.Reset_ {
		t.Fatalf("first update %+v, %v: want a snapshot", first, err)
	}
	apply(first)
	if !has(early[0]) {
		t.Fatal("the snapshot lacks A's key")
	}
	later := nodetest.Key("later", 0)
	ea.mustStep(&pb.StepRequest{Stored: storedOf([]wire.Key{later}, 2)})
	for !has(later) {
		u, err := st.Recv()
		if err != nil {
			t.Fatalf("no update with A's new key: %v", err)
		}
		apply(u)
	}
	ec.detach()
	for {
		if _, err := st.Recv(); err != nil {
			if status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("after detaching: %v, want FAILED_PRECONDITION", err)
			}
			break
		}
	}
}

func recvOne(ctx context.Context, e *fakeEngine, reg uint64) (*pb.SummaryUpdate, error) {
	st, err := e.c.WatchSummaries(ctx, &pb.WatchSummariesRequest{Registration: reg})
	if err != nil {
		return nil, err
	}
	return st.Recv()
}
