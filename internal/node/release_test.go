package node

import (
	"context"
	"net"
	"runtime"
	"strconv"
	"testing"
	"time"
	"weak"

	"github.com/kvp2p/kvp2p/internal/nodetest"
)

// TestStoppedNodeFreedByOneGC checks that a node that served a load and
// stopped holds nothing that outlives it: once nothing refers to it, the
// next garbage collection frees the node and its arena. Issue 14: a
// sync.Pool field (Manager.do's reply channels) put the node on the
// runtime's list of pools until the second collection after its last
// call, so each demo run's fleet (7 GiB of arenas at 40 requests/s)
// survived the next collection; under GOGC=100 that one comes only when
// the heap doubled, and five runs in one process were OOM-killed.
func TestStoppedNodeFreedByOneGC(t *testing.T) {
	nodes, arenas := servePairAndStop(t)
	runtime.GC() // one full cycle: marks, sweeps, clears weak pointers
	for i := range nodes {
		if nodes[i].Value() != nil {
			t.Errorf("node %d still reachable after one GC", i)
		}
		if arenas[i].Value() != nil {
			t.Errorf("arena of node %d still reachable after one GC", i)
		}
	}
}

// servePairAndStop runs a PD load between two nodes on loopback, stops
// both, and returns weak pointers to them and to their arenas only.
func servePairAndStop(t *testing.T) ([2]weak.Pointer[Node], [2]weak.Pointer[byte]) {
	t.Helper()
	var ns [2]*Node
	var served [2]chan error
	for i := range ns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		n, err := New(Config{PeerID: ln.Addr().String(), BlockBytes: nodetest.BlockBytes, Slots: 64, HashSeed: "s"})
		if err != nil {
			t.Fatal(err)
		}
		ns[i], served[i] = n, make(chan error, 1)
		go func() { served[i] <- n.Serve(ln) }()
	}
	p, c := ns[0], ns[1]
	pm, cm := p.Manager(), c.Manager()
	ks := []Key{nodetest.Key("gc", 0), nodetest.Key("gc", 1)}
	for _, k := range ks {
		if err := pm.PutBlock(k, nodetest.Bytes(k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := pm.NewRequest("p", TransferParams{RemoteDecoder: &Remote{KVRequestID: "kv"}}); err != nil {
		t.Fatal(err)
	}
	sj, _ := pm.SubmitStore("p", ks)
	host, port := nodetest.SplitPeer(t, p.PeerID())
	from := &Remote{KVRequestID: "kv", RemoteHost: host, RemotePort: port}
	// per-peer answers MISS while the handshake is pending, and a request
	// that missed stays missed: a fresh id per try.
	deadline := time.Now().Add(5 * time.Second)
	req := ""
	for n := 0; ; n++ {
		req = "d" + strconv.Itoa(n)
		if err := cm.NewRequest(req, TransferParams{RemotePrefiller: from}); err != nil {
			t.Fatal(err)
		}
		if cm.Lookup(req, ks[0]) == Hit {
			break
		}
		cm.RequestFinished(req)
		if time.Now().After(deadline) {
			t.Fatal("no HIT")
		}
		<-time.After(5 * time.Millisecond)
	}
	lj, err := cm.SubmitLoad(req, ks)
	if err != nil {
		t.Fatal(err)
	}
	if r := waitResult(t, cm, lj, 5*time.Second); !r.OK {
		t.Fatalf("load: %+v", r)
	}
	if r := waitResult(t, pm, sj, 5*time.Second); !r.OK {
		t.Fatalf("store: %+v", r)
	}
	cm.RequestFinished(req)
	pm.RequestFinished("p")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wn [2]weak.Pointer[Node]
	var wa [2]weak.Pointer[byte]
	for i, n := range ns {
		if err := n.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served[i]; err != nil {
			t.Errorf("serve: %v", err)
		}
		wn[i], wa[i] = weak.Make(n), weak.Make(&n.arena[0])
	}
	return wn, wa
}
