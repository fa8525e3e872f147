package sidecar

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kvp2p/kvp2p/internal/node"
	"github.com/kvp2p/kvp2p/internal/proccpu"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// Helpers shared with internal/node's tests, copied when the sidecar's
// tests moved here with it (the two packages' tests cannot share a file).

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The node's names, for the tests that moved from it.
type (
	Config       = node.Config
	EngineConfig = node.EngineConfig
	Key          = wire.Key
	Manager      = node.Manager
	JobResult    = node.JobResult
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
	benchLoadBytes  = 64 << 20
	benchBlockBytes = 256 << 10
	benchBlocks     = benchLoadBytes / benchBlockBytes
)

func benchBytes(k Key, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = k[i%len(k)] ^ byte(i>>8)
	}
	return b
}

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

// rawRig copies the same bytes over one plain TCP connection on 127.0.0.1,
// in block-sized writes, into a destination buffer.
type rawRig struct {
	wc       net.Conn
	src, dst []byte
	next     chan struct{} // a copy starts: the reader may fill dst
	got      chan error    // the copy ended
}

func newRawRig(b *testing.B) *rawRig {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	r := &rawRig{src: make([]byte, benchLoadBytes), dst: make([]byte, benchLoadBytes),
		next: make(chan struct{}), got: make(chan error)}
	for i := range r.src {
		r.src[i] = byte(i >> 8)
	}
	go func() {
		defer close(r.got)
		rc, err := ln.Accept()
		ln.Close()
		if err != nil {
			r.got <- err
			return
		}
		defer rc.Close()
		for range r.next {
			_, err := io.ReadFull(rc, r.dst)
			r.got <- err
			if err != nil {
				return
			}
		}
	}()
	if r.wc, err = net.Dial("tcp", ln.Addr().String()); err != nil {
		close(r.next)
		ln.Close()
		for range r.got {
		}
		b.Fatal(err)
	}
	b.Cleanup(func() {
		close(r.next)
		r.wc.Close()
		for range r.got {
		}
	})
	return r
}

func (r *rawRig) copy(b *testing.B) time.Duration {
	start := time.Now()
	r.next <- struct{}{}
	for off := 0; off < len(r.src); off += benchBlockBytes {
		if _, err := r.wc.Write(r.src[off : off+benchBlockBytes]); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-r.got; err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// interleave runs a and then c once untimed (handshakes, page faults), then
// one of each per op, so that both share the machine's noise, and reports
// each one's MB/s (benchLoadBytes per run) and c's time over a's as ratio.
// It also reports each one's CPU cost, process CPU seconds (user + system,
// every goroutine: both ends run in this process) per GB moved, from
// getrusage around each run.
func interleave(b *testing.B, aName string, a func(*testing.B) time.Duration, cName string, c func(*testing.B) time.Duration, ratio string) {
	a(b)
	c(b)
	b.ResetTimer()
	var ta, tc, ca, cc time.Duration
	for range b.N {
		c0, _ := proccpu.Used()
		ta += a(b)
		c1, _ := proccpu.Used()
		tc += c(b)
		c2, ok := proccpu.Used()
		if ok {
			ca, cc = ca+c1-c0, cc+c2-c1
		}
	}
	b.StopTimer()
	mb := float64(b.N) * benchLoadBytes / 1e6
	b.ReportMetric(mb/ta.Seconds(), aName+"_MB/s")
	b.ReportMetric(mb/tc.Seconds(), cName+"_MB/s")
	b.ReportMetric(tc.Seconds()/ta.Seconds(), ratio)
	if ca > 0 && cc > 0 {
		b.ReportMetric(ca.Seconds()/(mb/1e3), aName+"_cpu_s/GB")
		b.ReportMetric(cc.Seconds()/(mb/1e3), cName+"_cpu_s/GB")
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
