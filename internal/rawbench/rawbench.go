package rawbench

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/proccpu"
)

// Raw copies the same bytes over one plain TCP connection on 127.0.0.1,
// in block-sized writes, into a destination buffer.
type Raw struct {
	wc       net.Conn
	block    int
	src, dst []byte
	next     chan struct{} // a copy starts: the reader may fill dst
	got      chan error    // the copy ended
}

// NewRaw connects a Raw that copies size bytes in writes of block bytes
// (size a multiple of block); b's cleanup closes it.
func NewRaw(b *testing.B, size, block int) *Raw {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	r := &Raw{block: block, src: make([]byte, size), dst: make([]byte, size),
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

// Copy copies the bytes once and returns how long it took.
func (r *Raw) Copy(b *testing.B) time.Duration {
	start := time.Now()
	r.next <- struct{}{}
	for off := 0; off < len(r.src); off += r.block {
		if _, err := r.wc.Write(r.src[off : off+r.block]); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-r.got; err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// Interleave runs a and then c once untimed (handshakes, page faults), then
// one of each per op, so that both share the machine's noise, and reports
// each one's MB/s (bytes per run) and c's time over a's as ratio. It also
// reports each one's CPU cost, process CPU seconds (user + system, every
// goroutine: both ends run in this process) per GB moved, from getrusage
// around each run.
func Interleave(b *testing.B, bytes int, aName string, a func(*testing.B) time.Duration, cName string, c func(*testing.B) time.Duration, ratio string) {
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
	mb := float64(b.N) * float64(bytes) / 1e6
	b.ReportMetric(mb/ta.Seconds(), aName+"_MB/s")
	b.ReportMetric(mb/tc.Seconds(), cName+"_MB/s")
	b.ReportMetric(tc.Seconds()/ta.Seconds(), ratio)
	if ca > 0 && cc > 0 {
		b.ReportMetric(ca.Seconds()/(mb/1e3), aName+"_cpu_s/GB")
		b.ReportMetric(cc.Seconds()/(mb/1e3), cName+"_cpu_s/GB")
	}
}

// The load the node and sidecar benchmarks move, and raw TCP with them: 64
// MiB in 256 KiB blocks.
const (
	LoadBytes  = 64 << 20
	BlockBytes = 256 << 10
	Blocks     = LoadBytes / BlockBytes
)

// Bytes is block k's n bytes in the benchmarks: distinct per key and per
// offset, so that a misplaced chunk shows.
func Bytes(k [16]byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = k[i%len(k)] ^ byte(i>>8)
	}
	return b
}
