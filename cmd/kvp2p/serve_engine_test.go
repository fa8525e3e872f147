package main

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"

	pb "github.com/kvp2p/kvp2p/internal/engineapi/enginepb"
	"github.com/kvp2p/kvp2p/internal/nodetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestServeEngineSocket runs `kvp2p serve --engine-socket` and registers an
// engine over the socket: the command wires the engine API, and the socket
// is created mode 0600, replacing a stale one. The config sets no slots or
// block_bytes: the sidecar takes the engine's (16 chunks of 4096 bytes, not
// the defaults) from its Register.
func TestServeEngineSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "engine.sock")
	region := filepath.Join(dir, "vllm_offload_e.mmap")
	if err := os.WriteFile(region, make([]byte, 16*4096), 0o600); err != nil {
		t.Fatal(err)
	}
	// A stale socket from an earlier run: replaced, not an error.
	stale, err := listenStale(sock)
	if err != nil {
		t.Fatal(err)
	}
	stale.Close()
	cfg := nodetest.WriteConfig(t, "peer_id: 127.0.0.1:7600\nchunk_bytes: 4096\ntimers:\n  shutdown_drain: 100ms\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := &logWatch{want: `"msg":"engine API"`, seen: make(chan string, 1)}
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"serve", "--config", cfg, "--listen", "127.0.0.1:0", "--log-format", "json",
			"--engine-socket", sock, "--region-dir", dir}, io.Discard, stderr)
	}()
	select {
	case <-stderr.seen:
	case code := <-exited:
		t.Fatalf("serve exited %d:\n%s", code, stderr)
	}
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket: %v, mode %v", err, fi.Mode().Perm())
	}
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	st, err := pb.NewEngineClient(cc).Attach(sctx)
	if err != nil {
		t.Fatal(err)
	}
	reg := &pb.Register{ApiVersion: pb.ApiVersion_API_VERSION_1, EngineId: "e", RegionPath: region, NumChunks: 16, RowStride: 4096}
	if err := st.Send(&pb.EngineMessage{Msg: &pb.EngineMessage_Register{Register: reg}}); err != nil {
		t.Fatal(err)
	}
	m, err := st.Recv()
	if err != nil || m.GetRegistered().GetRegistration() == 0 {
		t.Fatalf("register: %v %v", m, err)
	}
	// The step socket is named to the engine, and answers.
	if got := m.GetRegistered().GetStepSocket(); got != sock+".step" {
		t.Fatalf("step_socket %q, want %q", got, sock+".step")
	}
	if fi, err := os.Stat(sock + ".step"); err != nil {
		t.Fatalf("step socket: %v", err)
	} else if fi.Mode().Perm() != 0o600 {
		t.Fatalf("step socket mode %v, want 0600", fi.Mode().Perm())
	}
	scancel()
	cancel()
	if code := <-exited; code != 0 {
		t.Fatalf("exit code %d:\n%s", code, stderr)
	}
}

// listenStale leaves a socket file behind, as a killed sidecar would.
func listenStale(path string) (io.Closer, error) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	ln.(interface{ SetUnlinkOnClose(bool) }).SetUnlinkOnClose(false)
	return ln, nil
}
