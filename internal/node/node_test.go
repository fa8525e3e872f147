package node

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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

// startNode runs a node on a fresh loopback port and stops it at cleanup.
func startNode(t *testing.T, mut func(*Config)) *Node {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{PeerID: ln.Addr().String(), BlockBytes: testBlock, Slots: 64, HashSeed: "s"}
	if mut != nil {
		mut(&cfg)
	}
	n, err := NewNode(cfg)
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

// waitResult polls the manager until job finishes or the deadline passes.
func waitResult(t *testing.T, m *Manager, job uint64, within time.Duration) JobResult {
	t.Helper()
	deadline := time.Now().Add(within)
	var seen []JobResult
	for time.Now().Before(deadline) {
		for _, r := range m.PollFinished() {
			if r.Job == job {
				return r
			}
			seen = append(seen, r)
		}
		<-time.After(2 * time.Millisecond)
	}
	t.Fatalf("job %d: no result within %v (others: %+v)", job, within, seen)
	return JobResult{}
}

// waitVerdict polls Lookup (ending a step between polls) until it is not RETRY.
func waitVerdict(t *testing.T, m *Manager, req string, k Key) Verdict {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if v := m.Lookup(req, k); v != Retry {
			return v
		}
		m.EndStep()
		<-time.After(2 * time.Millisecond)
	}
	t.Fatal("lookup stayed RETRY")
	return Retry
}

func TestLoopbackPD(t *testing.T) {
	p := startNode(t, nil)
	c := startNode(t, nil)
	pm, cm := p.Manager(), c.Manager()
	ks := []Key{testKey("a", 0), testKey("a", 1), testKey("a", 2)}
	for _, k := range ks {
		if err := pm.PutBlock(k, testBytes(k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := pm.NewRequest("p1", TransferParams{RemoteDecoder: &Remote{KVRequestID: "kv1"}}); err != nil {
		t.Fatal(err)
	}
	sj, _ := pm.SubmitStore("p1", ks)
	host, port := hostPort(t, p.PeerID())
	if err := cm.NewRequest("d1", TransferParams{RemotePrefiller: &Remote{KVRequestID: "kv1", RemoteHost: host, RemotePort: port}}); err != nil {
		t.Fatal(err)
	}
	// per-peer answers MISS while the handshake is pending; wait for it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if v := cm.Lookup("d1", ks[0]); v == Hit {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no HIT")
		}
		// A MISS marks the request failed: use a fresh request id.
		cm.RequestFinished("d1")
		cm.NewRequest("d1", TransferParams{RemotePrefiller: &Remote{KVRequestID: "kv1", RemoteHost: host, RemotePort: port}})
		<-time.After(5 * time.Millisecond)
	}
	lj, _ := cm.SubmitLoad("d1", ks)
	if r := waitResult(t, cm, lj, 5*time.Second); !r.OK {
		t.Fatalf("load: %+v", r)
	}
	if r := waitResult(t, pm, sj, 5*time.Second); !r.OK {
		t.Fatalf("store: %+v", r)
	}
	for _, k := range ks {
		got, ok := cm.ReadBlock(k)
		if !ok || !bytes.Equal(got, testBytes(k)) {
			t.Fatalf("block %x not loaded intact", k[:4])
		}
	}
	cm.RequestFinished("d1")
	pm.RequestFinished("p1")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}
