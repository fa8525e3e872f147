package node

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest"
)

// startFindNodes starts n nodes with finding on, each listing all the
// others as its deployment's members. Their listeners are bound first so
// that every node knows every peer id at start.
func startFindNodes(t *testing.T, n int) []*tnode {
	t.Helper()
	lns := make([]net.Listener, n)
	ids := make([]string, n)
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i], ids[i] = ln, ln.Addr().String()
	}
	out := make([]*tnode, n)
	for i := range out {
		ln := lns[i]
		out[i] = startTN(t, nodeOpt{wrapLn: func(l net.Listener) net.Listener { l.Close(); return ln }, mut: func(c *Config) {
			c.PeerID = ln.Addr().String()
			c.Find = FindConfig{Enabled: true, Peers: strings.Join(ids, ", "), Interval: 50 * time.Millisecond}
		}})
	}
	return out
}

// TestFindSourceLoopback: C finds the prefix A holds with no source named
// (A, B and C on loopback, summaries over their control connections),
// then loads it through the ordinary symmetric lookup, and the bytes are
// A's. A key nobody holds finds nobody; B, which holds a shorter prefix,
// loses to A.
func TestFindSourceLoopback(t *testing.T) {
	ns := startFindNodes(t, 3)
	a, b, c := ns[0], ns[1], ns[2]
	held := nodetest.Keys("find", 6)
	for i, k := range held {
		if err := a.m.PutBlock(k, nodetest.Bytes(k)); err != nil {
			t.Fatal(err)
		}
		if i < 3 {
			if err := b.m.PutBlock(k, nodetest.Bytes(k)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Summaries flush every 50 ms; on a busy machine a session may take a
	// while to come up, so the wait is generous and polls an outcome.
	var got Found
	deadline := time.Now().Add(10 * time.Second)
	for {
		f, ok := c.m.FindSource(held, 0)
		if ok && f.Peer == a.PeerID() && f.Blocks == len(held) {
			got = f
			break // (an earlier summary may have caught A between two PutBlocks)
		}
		if time.Now().After(deadline) {
			t.Fatalf("C never found A's prefix: last answer %+v %v", f, ok)
		}
		<-time.After(20 * time.Millisecond)
	}
	if f, ok := c.m.FindSource(held, 4); !ok || f.Peer != a.PeerID() {
		t.Fatalf("beyond 4 local blocks: %+v %v, want A (B holds 3)", f, ok)
	}
	if f, ok := c.m.FindSource(nodetest.Keys("nobody", 4), 0); ok {
		t.Fatalf("a prefix nobody holds found %+v", f)
	}
	// B's summary may come later than A's (its session to C may be later).
	for pre := c.m.Prefixes(held); len(pre) != 2 || pre[0] != (Found{a.PeerID(), 6}) || pre[1] != (Found{b.PeerID(), 3}); pre = c.m.Prefixes(held) {
		if time.Now().After(deadline) {
			t.Fatalf("Prefixes = %+v", pre)
		}
		<-time.After(20 * time.Millisecond)
	}
	if self := a.m.Prefixes(held); len(self) == 0 || self[0] != (Found{a.PeerID(), 6}) {
		t.Fatalf("A's own Prefixes = %+v", self)
	}

	// The found source is asked as a named one would be.
	host, port, _ := net.SplitHostPort(got.Peer)
	p, _ := strconv.Atoi(port)
	if err := c.m.NewRequest("r1", TransferParams{RemoteKVSource: &Remote{KVRequestID: "kv-r1", RemoteHost: host, RemotePort: p}}); err != nil {
		t.Fatal(err)
	}
	for i, v := range lookupAll(t, c.m, "r1", held) {
		if v != Hit {
			t.Fatalf("key %d: %v, want HIT", i, v)
		}
	}
	lj, _ := c.m.SubmitLoad("r1", held)
	if r := waitResult(t, c.m, lj, 5*time.Second); !r.OK {
		t.Fatalf("load: %+v", r)
	}
	checkBlocks(t, c.m, held)
}
