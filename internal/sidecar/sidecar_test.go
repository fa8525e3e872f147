package sidecar

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvp2p/kvp2p/internal/node"
	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/wire"

	pb "github.com/kvp2p/kvp2p/internal/engineapi/enginepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// noGeometry leaves the sidecar's geometry to its engine's Register.
func noGeometry(c *sidecarConfig) { c.Slots, c.BlockBytes = 0, 0 }

// A sidecar configured without slots or block_bytes takes them from its
// engine's first Register: before it, it has no node and says why; a
// Register naming no usable region fixes nothing; after it, blocks move
// between its region and a configured sidecar's; a restarted engine must
// bring the same geometry.
func TestSidecarGeometryFromRegister(t *testing.T) {
	a, b := startSidecar(t, nil), startSidecar(t, noGeometry)
	if b.node != nil {
		t.Fatal("a sidecar without geometry built its node before any Register")
	}
	if _, err := b.sc.Status(t.Context()); !errors.Is(err, ErrNoEngineYet) {
		t.Fatalf("status before the first Register: %v", err)
	}
	if _, err := b.sc.GoodbyeIdle(); !errors.Is(err, ErrNoEngineYet) {
		t.Fatalf("goodbye-idle before the first Register: %v", err)
	}
	// Refused Registers build nothing.
	outside := filepath.Join(t.TempDir(), "elsewhere.mmap")
	if err := os.WriteFile(outside, make([]byte, engChunks*nodetest.BlockBytes), 0o600); err != nil {
		t.Fatal(err)
	}
	refused := []struct {
		name           string
		chunks, stride uint64
		path           string
		code           codes.Code
	}{
		{"region outside region_dir", engChunks, nodetest.BlockBytes, outside, codes.FailedPrecondition},
		{"region file shorter than the geometry", engChunks * 2, nodetest.BlockBytes, b.region, codes.FailedPrecondition},
		{"more chunks than any sidecar takes", node.MaxSlots + 1, 1, b.region, codes.InvalidArgument},
		{"row_stride over block_bytes' bound", 1, maxBlockBytes + 1, b.region, codes.InvalidArgument},
	}
	for _, c := range refused {
		if _, err := tryAttach(t, b, c.chunks, c.stride, c.path); status.Code(err) != c.code {
			t.Fatalf("%s: %v, want %v", c.name, err, c.code)
		}
		if b.sc.Node() != nil {
			t.Fatalf("%s: the refused Register built the node", c.name)
		}
	}

	ea, eb := attach(t, a), attach(t, b)
	if b.node == nil || b.node.Config().Slots != engChunks || b.node.Config().BlockBytes != nodetest.BlockBytes {
		t.Fatalf("node after the Register: %+v", b.node)
	}
	if _, err := b.sc.Status(t.Context()); err != nil {
		t.Fatalf("status after the Register: %v", err)
	}
	keys := []wire.Key{nodetest.Key("late", 0), nodetest.Key("late", 1)}
	ea.store(a, "prod", nil, keys, 2, 9)
	params := &pb.TransferParams{RemoteKvSource: remoteOf(t, a), KvRequestId: "kv-late"}
	eb.mustStep(&pb.StepRequest{NewRequests: []*pb.NewRequest{{ReqId: "cons", Params: params}}})
	for _, k := range keys {
		if seen := eb.lookUntil("cons", k); seen[len(seen)-1] != pb.Verdict_VERDICT_HIT {
			t.Fatalf("verdicts %v, want ... HIT", seen)
		}
	}
	j := eb.job("cons", keys, 5, 6)
	if d := eb.waitJob(j.JobId, eb.mustStep(&pb.StepRequest{Loads: []*pb.Job{j}, EndStep: true})); !d.Success {
		t.Fatalf("load: %+v", d)
	}
	for i, k := range keys {
		if !bytes.Equal(readChunk(t, b, uint32(5+i)), nodetest.Bytes(k)) {
			t.Fatalf("chunk %d in B's region differs from A's block", 5+i)
		}
	}

	// A restarted engine: another geometry is refused, saying how to change
	// it; the same one is taken.
	eb.detach()
	bigger := filepath.Join(b.dir, "vllm_offload_big.mmap")
	if err := os.WriteFile(bigger, make([]byte, 2*engChunks*nodetest.BlockBytes), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := tryAttach(t, b, 2*engChunks, nodetest.BlockBytes, bigger)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "restart the sidecar") {
		t.Fatalf("restarted engine with another geometry: %v", err)
	}
	nodetest.WaitFor(t, func() bool {
		_, err := tryAttach(t, b, engChunks, nodetest.BlockBytes, b.region)
		return err == nil
	})
}

// A configured field is kept: the Register must agree with it, and only
// the unset one comes from the Register. A sidecar stopped before any
// Register stops cleanly.
func TestSidecarConfiguredFieldMustAgree(t *testing.T) {
	s := startSidecar(t, func(c *sidecarConfig) { c.Slots = 0 }) // block_bytes configured
	wide := filepath.Join(s.dir, "vllm_offload_wide.mmap")
	if err := os.WriteFile(wide, make([]byte, engChunks*2*nodetest.BlockBytes), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := tryAttach(t, s, engChunks, 2*nodetest.BlockBytes, wide)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "block_bytes") {
		t.Fatalf("row_stride against configured block_bytes: %v", err)
	}
	if s.sc.Node() != nil {
		t.Fatal("a refused Register built the node")
	}
	attach(t, s)
	if s.node.Config().Slots != engChunks {
		t.Fatalf("slots %d, want the Register's %d", s.node.Config().Slots, engChunks)
	}

	idle := startSidecar(t, noGeometry)
	idle.stop() // no Register ever came: Serve and ServeEngine return nil
	if _, err := tryAttach(t, idle, engChunks, nodetest.BlockBytes, idle.region); err == nil {
		t.Fatal("a stopped sidecar took a Register")
	}
}
