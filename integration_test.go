package kvp2p

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Integration tests: real nodes on loopback TCP. They wait on real time,
// but every wait is bounded, and every assertion is about an outcome or a
// generous bound ("within 3 s"), never a tight timing.

// logBuf collects a node's logs for assertions.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// tnode is a node under test.
type tnode struct {
	*Node
	m      *Manager
	fl     *testListener // the wrapped listener (nil unless wrapped)
	logs   *logBuf
	served chan error
}

type nodeOpt struct {
	wrap bool // wrap the listener in a testListener
	mut  func(*Config)
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
		PeerID: ln.Addr().String(), BlockBytes: testBlock, Slots: 128, HashSeed: "s",
		Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if o.mut != nil {
		o.mut(&cfg)
	}
	n, err := NewNode(cfg)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	tn := &tnode{Node: n, m: n.Manager(), logs: logs, served: make(chan error, 1)}
	var l net.Listener = ln
	if o.wrap {
		tn.fl = newTestListener(ln, min(n.cfg.ChunkBytes, n.cfg.BlockBytes))
		l = tn.fl
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

func pdParams(t testing.TB, kv string, src *tnode) TransferParams {
	host, port := splitPeer(t, src.PeerID())
	return TransferParams{RemotePrefiller: &Remote{KVRequestID: kv, RemoteHost: host, RemotePort: port}}
}

func symParams(t testing.TB, kv string, src *tnode) TransferParams {
	host, port := splitPeer(t, src.PeerID())
	return TransferParams{RemoteKVSource: &Remote{KVRequestID: kv, RemoteHost: host, RemotePort: port}}
}

func splitPeer(t testing.TB, id string) (string, int) {
	t.Helper()
	h, p, err := net.SplitHostPort(id)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return h, port
}

func keysOf(prefix string, n int) []Key {
	ks := make([]Key, n)
	for i := range ks {
		ks[i] = testKey(prefix, i)
	}
	return ks
}

// warm opens a ready session from c to p: a PD request's lookup is HIT
// exactly when its session is ready. A lookup that falls back (MISS) is
// retried with a fresh request id.
func warm(t *testing.T, c, p *tnode) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; ; i++ {
		id := fmt.Sprintf("warm-%d", i)
		if err := c.m.NewRequest(id, pdParams(t, id, p)); err != nil {
			t.Fatal(err)
		}
		v := waitVerdict(t, c.m, id, testKey("warm", 0))
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
		if err := p.m.PutBlock(k, testBytes(k)); err != nil {
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
func checkBlocks(t *testing.T, m *Manager, keys []Key) {
	t.Helper()
	for _, k := range keys {
		got, ok := m.ReadBlock(k)
		if !ok || !bytes.Equal(got, testBytes(k)) {
			t.Fatalf("block %x: present %v, intact %v", k[:4], ok, ok && bytes.Equal(got, testBytes(k)))
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
		{"block size", func(c *Config) { c.BlockBytes = testBlock / 2 }},
		{"fingerprint", func(c *Config) { c.Fingerprint = "llama-8b/bf16/32x8" }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := startTN(t, nodeOpt{mut: func(c *Config) { c.Fingerprint = "llama-8b/fp8/32x8" }})
			c := startTN(t, nodeOpt{mut: tt.mut})
			ks := keysOf("mm", 2)
			storeBlocks(t, p, "kv1", ks)
			if err := c.m.NewRequest("d1", pdParams(t, "kv1", p)); err != nil {
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
			ks := keysOf("fp", 3)
			sj := storeBlocks(t, p, "kv1", ks)
			c.m.NewRequest("d1", pdParams(t, "kv1", p))
			lj, _ := c.m.SubmitLoad("d1", ks)
			if r := waitResult(t, c.m, lj, 5*time.Second); !r.OK {
				t.Fatalf("load: %+v", r)
			}
			if r := waitResult(t, p.m, sj, 5*time.Second); !r.OK {
				t.Fatalf("store: %+v", r)
			}
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
			ks := keysOf(order, 8)
			var sj, lj uint64
			if order == "prefiller first" {
				sj = storeBlocks(t, p, "kv1", ks)
			}
			if err := c.m.NewRequest("d1", pdParams(t, "kv1", p)); err != nil {
				t.Fatal(err)
			}
			if v := c.m.Lookup("d1", ks[0]); v != Hit {
				t.Fatalf("PD lookup on a ready session = %v, want HIT", v)
			}
			lj, _ = c.m.SubmitLoad("d1", ks)
			if order == "decoder first" {
				// The fetch is waiting at the producer: nothing can finish yet.
				select {
				case <-time.After(100 * time.Millisecond):
				}
				for _, r := range c.m.PollFinished() {
					t.Fatalf("load finished before its blocks existed: %+v", r)
				}
				sj = storeBlocks(t, p, "kv1", ks)
			}
			if r := waitResult(t, c.m, lj, 5*time.Second); !r.OK || r.Bytes != uint64(len(ks)*testBlock) {
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
	held := keysOf("sym", 4)
	for _, k := range held {
		if err := p.m.PutBlock(k, testBytes(k)); err != nil {
			t.Fatal(err)
		}
	}
	ks := append(append([]Key{}, held...), testKey("absent", 0), testKey("absent", 1))
	if err := c.m.NewRequest("s1", symParams(t, "kv-s1", p)); err != nil {
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
	if r := waitResult(t, c.m, lj, 5*time.Second); !r.OK || r.Bytes != uint64(len(hits)*testBlock) {
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

// TestAbortMidTransfer: the consumer's request finishes while a large load
// streams. The load fails at once, but its destination slots stay Filling
// (so nothing can reuse them) until the producer's writer has stopped; then
// they are freed, and a later load into the same slots gets its own bytes.
func TestAbortMidTransfer(t *testing.T) {
	const blocks = 64
	p := startTN(t, nodeOpt{wrap: true, mut: func(c *Config) { c.Slots = 2 * blocks; c.Timers.HeartbeatTimeout = 5 * time.Second }})
	// The consumer's arena is exactly one load: while the aborted load's
	// slots are fenced, no other load can get a slot.
	c := startTN(t, nodeOpt{mut: func(c *Config) { c.Slots = blocks; c.Timers.HeartbeatTimeout = 5 * time.Second }})
	warm(t, c, p)
	ks := keysOf("big", blocks)
	sj := storeBlocks(t, p, "kv1", ks)
	paused := p.fl.pauseAfter(8 * testBlock)
	c.m.NewRequest("d1", pdParams(t, "kv1", p))
	lj, _ := c.m.SubmitLoad("d1", ks)
	waitClosed(t, paused, "the producer's writer blocking mid-transfer")

	c.m.RequestFinished("d1")
	if r := waitResult(t, c.m, lj, 5*time.Second); r.OK {
		t.Fatalf("aborted load reported OK: %+v", r)
	}
	// The producer's writer is stuck in a write: the slots are still fenced.
	for range 5 {
		st, err := c.m.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if st.Filling != blocks {
			t.Fatalf("slots freed while the producer's writer may still send into them: %+v", st)
		}
		c.m.NewRequest("d2", pdParams(t, "kv2", p))
		j2, _ := c.m.SubmitLoad("d2", keysOf("other", 1))
		if r := waitResult(t, c.m, j2, 5*time.Second); r.OK || !strings.Contains(r.Reason, "no destination slot") {
			t.Fatalf("a load got a slot while the aborted load's were fenced: %+v", r)
		}
		c.m.RequestFinished("d2")
		<-time.After(20 * time.Millisecond)
	}
	p.fl.resume()
	waitQuiet(t, c.m) // AbortAck and the data path's terminal frame: freed
	if r := waitResult(t, p.m, sj, 5*time.Second); r.OK {
		t.Fatalf("store job of an aborted transfer reported OK: %+v", r)
	}
	for _, k := range ks {
		if _, ok := c.m.ReadBlock(k); ok {
			t.Fatalf("block %x of the aborted load is readable", k[:4])
		}
	}

	// The same slots now take a new load, and hold its bytes only.
	ks3 := keysOf("after", blocks)
	sj3 := storeBlocks(t, p, "kv3", ks3)
	c.m.NewRequest("d3", pdParams(t, "kv3", p))
	lj3, _ := c.m.SubmitLoad("d3", ks3)
	if r := waitResult(t, c.m, lj3, 10*time.Second); !r.OK {
		t.Fatalf("load after the abort: %+v", r)
	}
	if r := waitResult(t, p.m, sj3, 5*time.Second); !r.OK {
		t.Fatalf("store after the abort: %+v", r)
	}
	checkBlocks(t, c.m, ks3)
	c.m.RequestFinished("d3")
	p.m.RequestFinished("p-kv1")
	p.m.RequestFinished("p-kv3")
	waitQuiet(t, c.m)
	waitQuiet(t, p.m)
}

// TestCorruptChunkFailsLoad: one payload byte flipped on the wire fails the
// load (CRC32C), and no block of it ever becomes readable.
func TestCorruptChunkFailsLoad(t *testing.T) {
	p := startTN(t, nodeOpt{wrap: true})
	c := startTN(t, nodeOpt{})
	warm(t, c, p)
	ks := keysOf("crc", 8)
	storeBlocks(t, p, "kv1", ks)
	flipped := p.fl.flipNext()
	c.m.NewRequest("d1", pdParams(t, "kv1", p))
	lj, _ := c.m.SubmitLoad("d1", ks)
	r := waitResult(t, c.m, lj, 5*time.Second)
	waitClosed(t, flipped, "the flip")
	if r.OK {
		t.Fatalf("load with a corrupt chunk reported OK: %+v", r)
	}
	waitLog(t, c, "corrupt chunk")
	waitQuiet(t, c.m)
	for _, k := range ks {
		if _, ok := c.m.ReadBlock(k); ok {
			t.Fatalf("block %x of the corrupt load is readable", k[:4])
		}
	}
	if st, _ := c.m.Stats(); st.Ready != 0 {
		t.Fatalf("a block of the corrupt load was committed: %+v", st)
	}
	// The source's own copy was never touched: a fresh request loads it intact.
	c.m.RequestFinished("d1")
	p.m.RequestFinished("p-kv1")
	storeBlocks(t, p, "kv2", ks)
	c.m.NewRequest("d2", pdParams(t, "kv2", p))
	if v := waitVerdict(t, c.m, "d2", ks[0]); v != Hit {
		t.Fatalf("lookup after the corrupt load = %v (session ended: %s)", v, c.logs)
	}
	lj2, _ := c.m.SubmitLoad("d2", ks)
	if r := waitResult(t, c.m, lj2, 5*time.Second); !r.OK {
		t.Fatalf("reload: %+v", r)
	}
	checkBlocks(t, c.m, ks)
}

// TestLoopbackKilledPeerSymmetric: a symmetric source dies with a load in
// flight and another request's lookups outstanding: the load fails, the
// outstanding lookups resolve MISS, and no slot leaks.
func TestLoopbackKilledPeerSymmetric(t *testing.T) {
	p := startTN(t, nodeOpt{wrap: true})
	c := startTN(t, nodeOpt{})
	warm(t, c, p)
	ks := keysOf("ksym", 16)
	for _, k := range ks {
		if err := p.m.PutBlock(k, testBytes(k)); err != nil {
			t.Fatal(err)
		}
	}
	c.m.NewRequest("s1", symParams(t, "kv-s1", p))
	for i, v := range lookupAll(t, c.m, "s1", ks) {
		if v != Hit {
			t.Fatalf("key %d: %v, want HIT", i, v)
		}
	}
	// s2's lookups are registered but not flushed: the step has not ended.
	c.m.NewRequest("s2", symParams(t, "kv-s2", p))
	if v := c.m.Lookup("s2", ks[0]); v != Retry {
		t.Fatalf("s2 lookup = %v, want RETRY", v)
	}
	paused := p.fl.pauseAfter(4 * testBlock)
	lj, _ := c.m.SubmitLoad("s1", ks)
	waitClosed(t, paused, "the load streaming")
	killed := time.Now()
	p.Close()
	r := waitResult(t, c.m, lj, 5*time.Second)
	if r.OK {
		t.Fatal("load from a killed peer succeeded")
	}
	if took := time.Since(killed); took > 3*time.Second {
		t.Fatalf("fallback took %v after the kill", took)
	}
	if vs := lookupAll(t, c.m, "s2", ks[:1]); vs[0] != Miss {
		t.Fatalf("outstanding lookup after the kill = %v, want MISS", vs[0])
	}
	if v := c.m.Lookup("s1", ks[0]); v != Miss {
		t.Fatalf("lookup of the failed request = %v, want MISS", v)
	}
	c.m.RequestFinished("s1")
	c.m.RequestFinished("s2")
	waitQuiet(t, c.m)
}

// TestSilentDataPath: the data connection goes silent (blackholed) while
// the control connection lives. Under domain the progress watchdog fails
// the load within about stall_timeout (1 s); under per-peer (no watchdog)
// it waits for the load timeout. Heartbeat timeouts are raised so that the
// data connections' read timeouts cannot fire first.
func TestSilentDataPath(t *testing.T) {
	for _, tt := range []struct {
		policy      string
		loadTimeout time.Duration
		reason      string
		atLeast     time.Duration // the result cannot come before this
		within      time.Duration // generous bound on when it comes
	}{
		{"domain", 20 * time.Second, "progress-stall", 0, 3 * time.Second},
		{"per-peer", 2500 * time.Millisecond, "load timed out", 2500 * time.Millisecond, 8 * time.Second},
	} {
		t.Run(tt.policy, func(t *testing.T) {
			mut := func(c *Config) {
				c.Policy = tt.policy
				c.Timers.HeartbeatTimeout = 5 * time.Second
				c.Timers.LoadTimeoutPD = tt.loadTimeout
			}
			p := startTN(t, nodeOpt{wrap: true, mut: mut})
			c := startTN(t, nodeOpt{mut: mut})
			warm(t, c, p)
			ks := keysOf("silent", 4)
			storeBlocks(t, p, "kv1", ks)
			p.fl.blackhole(true)
			c.m.NewRequest("d1", pdParams(t, "kv1", p))
			start := time.Now()
			lj, _ := c.m.SubmitLoad("d1", ks)
			r := waitResult(t, c.m, lj, tt.within)
			took := time.Since(start)
			if r.OK {
				t.Fatalf("load over a silent data path succeeded: %+v", r)
			}
			if !strings.Contains(r.Reason, tt.reason) {
				t.Fatalf("load failed with %q, want %q", r.Reason, tt.reason)
			}
			if took < tt.atLeast {
				t.Fatalf("load failed after %v, before the load timeout %v", took, tt.atLeast)
			}
			t.Logf("%s: load failed after %v: %s", tt.policy, took.Round(time.Millisecond), r.Reason)
			for _, k := range ks {
				if _, ok := c.m.ReadBlock(k); ok {
					t.Fatalf("block %x readable after a failed load", k[:4])
				}
			}
		})
	}
}

// pollAll collects m's results until stop is closed, then once more: after
// a node stopped, PollFinished returns what its shutdown settled.
func pollAll(m *Manager, stop <-chan struct{}) <-chan []JobResult {
	out := make(chan []JobResult, 1)
	go func() {
		var all []JobResult
		for {
			all = append(all, m.PollFinished()...)
			select {
			case <-stop:
				all = append(all, m.PollFinished()...)
				out <- all
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return out
}

// readStopped reads a block from a stopped node's store (no loop runs).
func readStopped(n *tnode, k Key) ([]byte, bool) {
	sl, ok := n.st.Lookup(k)
	if !ok {
		return nil, false
	}
	return n.st.Bytes(sl), true
}

// TestShutdownWithLoadsInFlight: Node.Shutdown while transfers stream.
// Every job gets exactly one result (PollFinished still answers after the
// node stopped), a load reported OK has its bytes, and the stopped node
// holds no Filling or Pinned slot.
func TestShutdownWithLoadsInFlight(t *testing.T) {
	const reqs, blocks = 4, 16
	for _, tt := range []struct {
		name   string
		who    string // the node shut down
		resume bool   // the producer's writer resumes (else it stays blocked past the drain)
		allOK  bool
	}{
		{"consumer drains", "consumer", true, true},
		{"consumer drain times out", "consumer", false, false},
		{"producer drains", "producer", true, true}, // what it acknowledged as served is loaded
	} {
		t.Run(tt.name, func(t *testing.T) {
			hb := func(c *Config) {
				c.Timers.HeartbeatTimeout = 5 * time.Second
				c.Timers.ShutdownDrain = 10 * time.Second
				if !tt.resume {
					c.Timers.ShutdownDrain = 300 * time.Millisecond
				}
			}
			p := startTN(t, nodeOpt{wrap: true, mut: hb})
			c := startTN(t, nodeOpt{mut: hb})
			warm(t, c, p)
			keys := map[uint64][]Key{}
			stores := map[uint64]bool{}
			for i := range reqs {
				kv := fmt.Sprintf("kv%d", i)
				ks := keysOf(kv, blocks)
				stores[storeBlocks(t, p, kv, ks)] = true
				keys[uint64(i)] = ks
			}
			paused := p.fl.pauseAfter(5 * testBlock)
			loads := map[uint64][]Key{}
			for i := range reqs {
				kv := fmt.Sprintf("kv%d", i)
				c.m.NewRequest("d"+kv, pdParams(t, kv, p))
				j, _ := c.m.SubmitLoad("d"+kv, keys[uint64(i)])
				loads[j] = keys[uint64(i)]
			}
			waitClosed(t, paused, "the transfers streaming")

			down := c
			if tt.who == "producer" {
				down = p
			}
			stopped := make(chan struct{})
			cRes := pollAll(c.m, stopped)
			pRes := pollAll(p.m, stopped)
			shut := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				shut <- down.Shutdown(ctx)
			}()
			if tt.resume {
				<-time.After(100 * time.Millisecond) // let the shutdown begin with the writer blocked
				p.fl.resume()
			}
			select {
			case err := <-shut:
				if err != nil {
					t.Fatalf("shutdown: %v", err)
				}
			case <-time.After(25 * time.Second):
				t.Fatal("shutdown did not return")
			}
			if tt.who == "producer" {
				// The consumer's loads settle on the producer's goodbye.
				deadline := time.Now().Add(5 * time.Second)
				for {
					st, _ := c.m.Stats()
					if st.Filling == 0 || time.Now().After(deadline) {
						break
					}
					<-time.After(5 * time.Millisecond)
				}
			}
			close(stopped)
			cAll, pAll := <-cRes, <-pRes
			final, err := down.FinalStats()
			if err != nil {
				t.Fatalf("store check: %v", err)
			}
			if final.Filling != 0 || final.Pinned != 0 {
				t.Fatalf("%s stopped holding slots: %+v", tt.who, final)
			}

			seen := map[uint64]int{}
			okLoads := 0
			for _, r := range cAll {
				if _, mine := loads[r.Job]; !mine || r.Kind != JobLoad {
					continue
				}
				seen[r.Job]++
				if !r.OK {
					continue
				}
				okLoads++
				for _, k := range loads[r.Job] {
					var got []byte
					var ok bool
					if tt.who == "consumer" {
						got, ok = readStopped(c, k)
					} else {
						got, ok = c.m.ReadBlock(k)
					}
					if !ok || !bytes.Equal(got, testBytes(k)) {
						t.Fatalf("job %d reported OK but block %x is missing or wrong", r.Job, k[:4])
					}
				}
			}
			for j := range loads {
				if seen[j] != 1 {
					t.Fatalf("load %d got %d results, want exactly 1 (all: %+v)", j, seen[j], cAll)
				}
			}
			if tt.allOK && okLoads != reqs {
				t.Fatalf("%d of %d loads OK; the drain should have let them all finish: %+v", okLoads, reqs, cAll)
			}
			if !tt.resume && okLoads != 0 {
				t.Fatalf("%d loads OK with the writer blocked past the drain", okLoads)
			}
			if tt.who == "producer" {
				sseen := map[uint64]int{}
				for _, r := range pAll {
					if stores[r.Job] && r.Kind == JobStore {
						sseen[r.Job]++
					}
				}
				for j := range stores {
					if sseen[j] != 1 {
						t.Fatalf("store %d got %d results, want exactly 1 (all: %+v)", j, sseen[j], pAll)
					}
				}
				waitQuiet(t, c.m)
			}
			t.Logf("%s: %d of %d loads OK: %+v", tt.name, okLoads, reqs, cAll)
			if testing.Verbose() && okLoads < reqs {
				t.Logf("consumer log:\n%s\nproducer log:\n%s", c.logs, p.logs)
			}
		})
	}
}
