package sidecar

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kvp2p/kvp2p/internal/node"
	"github.com/kvp2p/kvp2p/internal/rawbench"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// Helpers shared with internal/node's tests, copied when the sidecar's
// tests moved here with it (the two packages' tests cannot share a file).

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The node's names, for the tests that moved from it.
type (
	Config    = node.Config
	Key       = wire.Key
	Manager   = node.Manager
	JobResult = node.JobResult
)

const testBlock = 64 << 10

func testKey(p string, i int) Key {
	h := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", p, i)))
	var k Key
	copy(k[:], h[:])
	return k
}

func testBytes(k Key) []byte {
	b := make([]byte, testBlock)
	for i := range b {
		b[i] = k[i%len(k)] + byte(i/7)
	}
	return b
}

const (
	benchLoadBytes  = rawbench.LoadBytes
	benchBlockBytes = rawbench.BlockBytes
	benchBlocks     = rawbench.Blocks
)

func benchBytes(k Key, n int) []byte { return rawbench.Bytes(k, n) }

// waitJob waits on m until job's result (Manager.WaitFinished), for at
// most 30 s: a benchmark times the load to the loop turn that settled it,
// as raw TCP's copy is timed to its reader's return.
func waitJob(tb testing.TB, m *Manager, job uint64) JobResult {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		for _, r := range m.WaitFinished(ctx) {
			if r.Job == job {
				return r
			}
		}
		if ctx.Err() != nil {
			tb.Fatalf("job %d: no result within 30 s", job)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		<-time.After(5 * time.Millisecond)
	}
}

// startNode runs a node on a fresh loopback port and stops it at cleanup.
func startNode(t *testing.T, mut func(*Config)) *node.Node {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{PeerID: ln.Addr().String(), BlockBytes: testBlock, Slots: 64, HashSeed: "s"}
	if mut != nil {
		mut(&cfg)
	}
	n, err := node.NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- n.Serve(ln) }()
	t.Cleanup(func() {
		n.Close()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return n
}

func hostPort(t *testing.T, id string) (string, int) {
	h, p, err := net.SplitHostPort(id)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(p)
	return h, port
}
