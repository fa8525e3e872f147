package node

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startNode runs a node on a fresh loopback port and stops it at cleanup.
func startNode(t *testing.T, mut func(*Config)) *Node {
	t.Helper()
	return nodetest.Start(t, func(id string) (*Node, error) {
		cfg := Config{PeerID: id, BlockBytes: nodetest.BlockBytes, Slots: 64, HashSeed: "s"}
		if mut != nil {
			mut(&cfg)
		}
		return New(cfg)
	})
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
	ks := []Key{nodetest.Key("a", 0), nodetest.Key("a", 1), nodetest.Key("a", 2)}
	for _, k := range ks {
		if err := pm.PutBlock(k, nodetest.Bytes(k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := pm.NewRequest("p1", TransferParams{RemoteDecoder: &Remote{KVRequestID: "kv1"}}); err != nil {
		t.Fatal(err)
	}
	sj, _ := pm.SubmitStore("p1", ks)
	host, port := nodetest.SplitPeer(t, p.PeerID())
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
		if !ok || !bytes.Equal(got, nodetest.Bytes(k)) {
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
