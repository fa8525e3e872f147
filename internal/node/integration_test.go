package node

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/logtest"
	"github.com/kvp2p/kvp2p/internal/nodetest"
)

// Loopback integration tests: real nodes on 127.0.0.1. This file holds
// the harness and the happy paths; integration_fault_test.go the faults.

// Integration tests: real nodes on loopback TCP. They wait on real time,
// but every wait is bounded, and every assertion is about an outcome or a
// generous bound ("within 3 s"), never a tight timing.

// logBuf collects log lines for assertions.
type logBuf = logtest.Buffer

// tnode is a node under test.
type tnode struct {
	*Node
	m      *Manager
	fl     *testFaults // faults on its accepted data connections (nil unless wrapped)
	logs   *logBuf
	served chan error
}

type nodeOpt struct {
	wrap   bool // wrap the listener for testFaults
	wrapLn func(net.Listener) net.Listener
	mut    func(*Config)
}

// startTN runs a node on a fresh loopback port; it is closed at cleanup.
func startTN(t testing.TB, o nodeOpt) *tnode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuf{}
	cfg := Config{
		PeerID: ln.Addr().String(), BlockBytes: nodetest.BlockBytes, Slots: 128, HashSeed: "s",
		Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if o.mut != nil {
		o.mut(&cfg)
	}
	n, err := New(cfg)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	tn := &tnode{Node: n, m: n.Manager(), logs: logs, served: make(chan error, 1)}
	var l net.Listener = ln
	if o.wrap {
		tn.fl, l = newTestFaults(ln)
	}
	if o.wrapLn != nil {
		l = o.wrapLn(l)
	}
	go func() { tn.served <- n.Serve(l) }()
	t.Cleanup(func() {
		n.Close()
		select {
		case err := <-tn.served:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%v: Serve did not return within 10 s of Close", n)
		}
	})
	return tn
}

// warm opens a ready session from c to p: a PD request's lookup is HIT
// exactly when its session is ready. A lookup that falls back (MISS) is
// retried with a fresh request id.
func warm(t *testing.T, c, p *tnode) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; ; i++ {
		id := fmt.Sprintf("warm-%d", i)
		if err := c.m.NewRequest(id, nodetest.PDParams(t, id, p.PeerID())); err != nil {
			t.Fatal(err)
		}
		v := waitVerdict(t, c.m, id, nodetest.Key("warm", 0))
		c.m.RequestFinished(id)
		if v == Hit {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no session from %v to %v", c, p)
		}
		<-time.After(10 * time.Millisecond)
	}
}

// storeBlocks puts keys into p's store and offers them to the decoder of kv.
func storeBlocks(t *testing.T, p *tnode, kv string, keys []Key) uint64 {
	t.Helper()
	for _, k := range keys {
		if err := p.m.PutBlock(k, nodetest.Bytes(k)); err != nil {
			t.Fatal(err)
		}
	}
	id := "p-" + kv
	if err := p.m.NewRequest(id, TransferParams{RemoteDecoder: &Remote{KVRequestID: kv}}); err != nil {
		t.Fatal(err)
	}
	j, err := p.m.SubmitStore(id, keys)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// checkBlocks fails unless every key reads back with its test bytes.
// pdLoad has c look up ks[0] for request req, a PD load of kv from p
// that p stored already, until HIT, then load ks; the load must succeed.
func pdLoad(t *testing.T, c, p *tnode, req, kv string, ks []Key) {
	t.Helper()
	if err := c.m.NewRequest(req, nodetest.PDParams(t, kv, p.PeerID())); err != nil {
		t.Fatal(err)
	}
	if v := waitVerdict(t, c.m, req, ks[0]); v != Hit {
		t.Fatalf("lookup = %v, want HIT", v)
	}
	j, _ := c.m.SubmitLoad(req, ks)
	if r := waitResult(t, c.m, j, 5*time.Second); !r.OK {
		t.Fatalf("load: %+v", r)
	}
}

// storeAndLoad has p store ks as kv and c load them for request req (PD,
// over a warm session); the store and the load must both succeed.
func storeAndLoad(t *testing.T, c, p *tnode, req, kv string, ks []Key) {
	t.Helper()
	sj := storeBlocks(t, p, kv, ks)
	if err := c.m.NewRequest(req, nodetest.PDParams(t, kv, p.PeerID())); err != nil {
		t.Fatal(err)
	}
	lj, _ := c.m.SubmitLoad(req, ks)
	if r := waitResult(t, c.m, lj, 5*time.Second); !r.OK {
		t.Fatalf("load: %+v", r)
	}
	if r := waitResult(t, p.m, sj, 5*time.Second); !r.OK {
		t.Fatalf("store: %+v", r)
	}
}

func checkBlocks(t *testing.T, m *Manager, keys []Key) {
	t.Helper()
	for _, k := range keys {
		got, ok := m.ReadBlock(k)
		if !ok || !bytes.Equal(got, nodetest.Bytes(k)) {
			t.Fatalf("block %x: present %v, intact %v", k[:4], ok, ok && bytes.Equal(got, nodetest.Bytes(k)))
		}
	}
}

// waitQuiet waits until no slot of m's store is Filling or Pinned.
func waitQuiet(t *testing.T, m *Manager) {
	t.Helper()
	var st Stats
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err = m.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if st.Filling == 0 && st.Pinned == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("slots still busy after 10 s: %+v", st)
		}
		<-time.After(5 * time.Millisecond)
	}
}

func waitLog(t *testing.T, n *tnode, substr string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(n.logs.String(), substr) {
		if time.Now().After(deadline) {
			t.Fatalf("%v: no %q in the log:\n%s", n, substr, n.logs.String())
		}
		<-time.After(5 * time.Millisecond)
	}
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not within 10 s", what)
	}
}

// TestHandshakeMismatchFallsBack: a consumer whose hash seed, block size or
// layout fingerprint differs from its source's never gets a session: the
// request falls back (MISS, the load fails at once) and the log names the
// cause, incompatible.
func TestHandshakeMismatchFallsBack(t *testing.T) {
	for _, tt := range []struct {
		name string
		mut  func(*Config)
	}{
		{"hash seed", func(c *Config) { c.HashSeed = "other" }},
		{"block size", func(c *Config) { c.BlockBytes = nodetest.BlockBytes / 2 }},
		{"fingerprint", func(c *Config) { c.Fingerprint = "llama-8b/bf16/32x8" }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := startTN(t, nodeOpt{mut: func(c *Config) { c.Fingerprint = "llama-8b/fp8/32x8" }})
			c := startTN(t, nodeOpt{mut: tt.mut})
			ks := nodetest.Keys("mm", 2)
			storeBlocks(t, p, "kv1", ks)
			if err := c.m.NewRequest("d1", nodetest.PDParams(t, "kv1", p.PeerID())); err != nil {
				t.Fatal(err)
			}
			if v := waitVerdict(t, c.m, "d1", ks[0]); v != Miss {
				t.Fatalf("lookup = %v, want MISS", v)
			}
			j, _ := c.m.SubmitLoad("d1", ks)
			if r := waitResult(t, c.m, j, 5*time.Second); r.OK {
				t.Fatalf("load from an incompatible peer succeeded: %+v", r)
			}
			waitLog(t, c, "cause=incompatible")
			if _, ok := c.m.ReadBlock(ks[0]); ok {
				t.Fatal("a block arrived from an incompatible peer")
			}
			c.m.RequestFinished("d1")
			waitQuiet(t, c.m)
		})
	}
}

// TestEmptyFingerprintIsCompatible: an empty layout fingerprint matches any
// (as in vLLM); blocks load intact either way round.
func TestEmptyFingerprintIsCompatible(t *testing.T) {
	for _, fp := range [][2]string{{"", "m/fp8"}, {"m/fp8", ""}, {"m/fp8", "m/fp8"}} {
		t.Run(fmt.Sprintf("producer=%q,consumer=%q", fp[0], fp[1]), func(t *testing.T) {
			p := startTN(t, nodeOpt{mut: func(c *Config) { c.Fingerprint = fp[0] }})
			c := startTN(t, nodeOpt{mut: func(c *Config) { c.Fingerprint = fp[1] }})
			warm(t, c, p)
			ks := nodetest.Keys("fp", 3)
			storeAndLoad(t, c, p, "d1", "kv1", ks)
			checkBlocks(t, c.m, ks)
			if strings.Contains(c.logs.String(), "incompatible") {
				t.Fatalf("consumer logged an incompatibility:\n%s", c.logs)
			}
		})
	}
}

// TestPDBothOrders: a PD transfer completes whichever side comes first:
// the prefiller storing before the decoder fetches, or the decoder's fetch
// waiting for the prefiller's store.
func TestPDBothOrders(t *testing.T) {
	for _, order := range []string{"prefiller first", "decoder first"} {
		t.Run(order, func(t *testing.T) {
			p := startTN(t, nodeOpt{})
			c := startTN(t, nodeOpt{})
			warm(t, c, p)
			ks := nodetest.Keys(order, 8)
			var sj, lj uint64
			if order == "prefiller first" {
				sj = storeBlocks(t, p, "kv1", ks)
			}
			if err := c.m.NewRequest("d1", nodetest.PDParams(t, "kv1", p.PeerID())); err != nil {
				t.Fatal(err)
			}
			if v := c.m.Lookup("d1", ks[0]); v != Hit {
				t.Fatalf("PD lookup on a ready session = %v, want HIT", v)
			}
			lj, _ = c.m.SubmitLoad("d1", ks)
			if order == "decoder first" {
				// The fetch is waiting at the producer: nothing can finish yet.
				<-time.After(100 * time.Millisecond)
				for _, r := range c.m.PollFinished() {
					t.Fatalf("load finished before its blocks existed: %+v", r)
				}
				sj = storeBlocks(t, p, "kv1", ks)
			}
			if r := waitResult(t, c.m, lj, 5*time.Second); !r.OK || r.Bytes != uint64(len(ks)*nodetest.BlockBytes) {
				t.Fatalf("load: %+v", r)
			}
			if r := waitResult(t, p.m, sj, 5*time.Second); !r.OK {
				t.Fatalf("store: %+v", r)
			}
			checkBlocks(t, c.m, ks)
			c.m.RequestFinished("d1")
			p.m.RequestFinished("p-kv1")
			waitQuiet(t, c.m)
			waitQuiet(t, p.m)
		})
	}
}

// lookupAll registers keys for req, ends the step, and polls until no
// verdict is RETRY.
func lookupAll(t *testing.T, m *Manager, req string, keys []Key) []Verdict {
	t.Helper()
	vs := make([]Verdict, len(keys))
	deadline := time.Now().Add(5 * time.Second)
	for {
		pending := false
		for i, k := range keys {
			if vs[i] = m.Lookup(req, k); vs[i] == Retry {
				pending = true
			}
		}
		if !pending {
			return vs
		}
		if time.Now().After(deadline) {
			t.Fatalf("lookups still RETRY after 5 s: %v", vs)
		}
		m.EndStep()
		<-time.After(time.Millisecond)
	}
}

// TestSymmetricLookupThenLoad: a symmetric consumer looks keys up (RETRY,
// then the step ends and the producer answers), loads the hits, and gets
// their bytes; the producer's lookup pins are all released.
func TestSymmetricLookupThenLoad(t *testing.T) {
	p := startTN(t, nodeOpt{})
	c := startTN(t, nodeOpt{})
	warm(t, c, p)
	held := nodetest.Keys("sym", 4)
	for _, k := range held {
		if err := p.m.PutBlock(k, nodetest.Bytes(k)); err != nil {
			t.Fatal(err)
		}
	}
	ks := append(append([]Key{}, held...), nodetest.Key("absent", 0), nodetest.Key("absent", 1))
	if err := c.m.NewRequest("s1", nodetest.SymParams(t, "kv-s1", p.PeerID())); err != nil {
		t.Fatal(err)
	}
	if v := c.m.Lookup("s1", ks[0]); v != Retry {
		t.Fatalf("first lookup = %v, want RETRY (nothing asked yet)", v)
	}
	vs := lookupAll(t, c.m, "s1", ks)
	var hits []Key
	for i, v := range vs {
		want := Hit
		if i >= len(held) {
			want = Miss
		}
		if v != want {
			t.Fatalf("key %d: %v, want %v", i, v, want)
		}
		if v == Hit {
			hits = append(hits, ks[i])
		}
	}
	lj, _ := c.m.SubmitLoad("s1", hits)
	if r := waitResult(t, c.m, lj, 5*time.Second); !r.OK || r.Bytes != uint64(len(hits)*nodetest.BlockBytes) {
		t.Fatalf("load: %+v", r)
	}
	checkBlocks(t, c.m, hits)
	for _, k := range ks[len(held):] {
		if _, ok := c.m.ReadBlock(k); ok {
			t.Fatalf("a missed key %x is readable", k[:4])
		}
	}
	c.m.RequestFinished("s1")
	waitQuiet(t, c.m)
	waitQuiet(t, p.m)
}
