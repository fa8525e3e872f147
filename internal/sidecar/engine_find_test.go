package sidecar

import (
	"testing"
	"time"

	pb "github.com/kvp2p/kvp2p/internal/engineapi/enginepb"
	"github.com/kvp2p/kvp2p/internal/node"
)

func findOn(peers string) func(*Config) {
	return func(c *Config) {
		c.Find = node.FindConfig{Enabled: true, Peers: peers, Interval: 50 * time.Millisecond}
	}
}

func storedOf(keys []Key, chunks ...uint32) *pb.StoredBlocks {
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
	keys := []Key{testKey("found", 0), testKey("found", 1), testKey("found", 2)}
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

	other := testKey("other", 0)
	ea.mustStep(&pb.StepRequest{Stored: storedOf([]Key{other}, 5)})
	if got := a.node.Manager().Prefixes(keys); len(got) != 0 {
		t.Fatalf("A still summarises the replaced key: %+v", got)
	}
	if got := a.node.Manager().Prefixes(keys[1:]); len(got) == 0 || got[0].Blocks != 2 {
		t.Fatalf("A's own prefix of the keys it still holds: %+v", got)
	}
	if _, err := ea.step(&pb.StepRequest{Stored: storedOf([]Key{other}, engChunks)}); err == nil {
		t.Fatal("a stored chunk out of range was accepted")
	}
	if _, err := ea.step(&pb.StepRequest{Stored: &pb.StoredBlocks{KeysPacked: []byte{1}, ChunkIds: []uint32{1}}}); err == nil {
		t.Fatal("stored keys of the wrong length were accepted")
	}
}
