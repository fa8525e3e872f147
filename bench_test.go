package kvp2p

import (
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"testing"
	"time"
)

// Benchmarks over 127.0.0.1 with real nodes. kvp2p's load path (Manager
// calls through the loop, control messages, CRC32C-checked chunks written
// into arena slots) against a plain TCP copy of the same bytes:
//
//	go test -run '^$' -bench 'Load|Raw|Lookup' -benchtime 3s .

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

// pollJob polls m until job's result, for at most 30 s.
func pollJob(tb testing.TB, m *Manager, job uint64) JobResult {
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, r := range m.PollFinished() {
			if r.Job == job {
				return r
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("job %d: no result within 30 s", job)
		}
		<-time.After(200 * time.Microsecond)
	}
}

// benchPair starts a producer and a consumer with a ready session and the
// producer holding blocks keys.
func benchPair(b *testing.B, keys []Key) (p, c *tnode) {
	mut := func(cfg *Config) {
		cfg.BlockBytes, cfg.Slots = benchBlockBytes, max(len(keys), 16)
		cfg.Log = nil
	}
	p = startTN(b, nodeOpt{mut: mut})
	c = startTN(b, nodeOpt{mut: mut})
	for _, k := range keys {
		if err := p.m.PutBlock(k, benchBytes(k, benchBlockBytes)); err != nil {
			b.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; ; i++ {
		id := fmt.Sprintf("warm-%d", i)
		c.m.NewRequest(id, pdParams(b, id, p))
		v := c.m.Lookup(id, keys[0])
		c.m.RequestFinished(id)
		if v == Hit {
			return p, c
		}
		if time.Now().After(deadline) {
			b.Fatal("no session")
		}
		<-time.After(time.Millisecond)
	}
}

// BenchmarkLoadLoopback: one 64 MiB PD load (256 KiB blocks) per op, from
// SubmitStore and SubmitLoad to both results.
func BenchmarkLoadLoopback(b *testing.B) {
	keys := keysOf("bench", benchBlocks)
	p, c := benchPair(b, keys)
	b.SetBytes(benchLoadBytes)
	b.ResetTimer()
	for i := range b.N {
		kv := fmt.Sprintf("kv%d", i)
		p.m.NewRequest("p"+kv, TransferParams{RemoteDecoder: &Remote{KVRequestID: kv}})
		sj, _ := p.m.SubmitStore("p"+kv, keys)
		c.m.NewRequest("d"+kv, pdParams(b, kv, p))
		lj, _ := c.m.SubmitLoad("d"+kv, keys)
		if r := pollJob(b, c.m, lj); !r.OK {
			b.Fatalf("load: %+v", r)
		}
		if r := pollJob(b, p.m, sj); !r.OK {
			b.Fatalf("store: %+v", r)
		}
		c.m.RequestFinished("d" + kv)
		p.m.RequestFinished("p" + kv)
	}
	b.StopTimer()
	for _, k := range []Key{keys[0], keys[len(keys)-1]} {
		if got, ok := c.m.ReadBlock(k); !ok || string(got) != string(benchBytes(k, benchBlockBytes)) {
			b.Fatalf("block %x not loaded intact", k[:4])
		}
	}
}

// BenchmarkRawTCPLoopback moves the same bytes per op over one plain TCP
// connection, in block-sized writes, into a destination buffer.
func BenchmarkRawTCPLoopback(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	src, dst := make([]byte, benchLoadBytes), make([]byte, benchLoadBytes)
	for i := range src {
		src[i] = byte(i >> 8)
	}
	next, got := make(chan struct{}), make(chan error)
	go func() {
		defer close(got)
		rc, err := ln.Accept()
		if err != nil {
			got <- err
			return
		}
		defer rc.Close()
		for range next {
			_, err := io.ReadFull(rc, dst)
			got <- err
			if err != nil {
				return
			}
		}
	}()
	wc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		close(next)
		ln.Close()
		for range got {
		}
		b.Fatal(err)
	}
	defer func() {
		close(next)
		wc.Close()
		for range got {
		}
	}()
	b.SetBytes(benchLoadBytes)
	b.ResetTimer()
	for range b.N {
		next <- struct{}{}
		for off := 0; off < len(src); off += benchBlockBytes {
			if _, err := wc.Write(src[off : off+benchBlockBytes]); err != nil {
				b.Fatal(err)
			}
		}
		if err := <-got; err != nil {
			b.Fatal(err)
		}
	}
}

func mbPerSec(r testing.BenchmarkResult) float64 {
	if r.N == 0 || r.T <= 0 {
		return 0
	}
	return float64(r.Bytes) * float64(r.N) / r.T.Seconds() / 1e6
}

// BenchmarkLoadVsRaw runs the two benchmarks above in alternation, three
// times, and reports the median of the ratios kvp2p/raw (x_raw), each
// measured back to back so that they share the machine's noise. It does
// its whole measurement once per call, whatever b.N.
func BenchmarkLoadVsRaw(b *testing.B) {
	var ratios, kv, raw []float64
	for range 3 {
		k := testing.Benchmark(BenchmarkLoadLoopback)
		r := testing.Benchmark(BenchmarkRawTCPLoopback)
		if mbPerSec(k) == 0 || mbPerSec(r) == 0 {
			b.Fatal("an inner benchmark failed")
		}
		kv, raw = append(kv, mbPerSec(k)), append(raw, mbPerSec(r))
		ratios = append(ratios, mbPerSec(k)/mbPerSec(r))
	}
	b.ReportMetric(median(kv), "kvp2p_MB/s")
	b.ReportMetric(median(raw), "raw_MB/s")
	b.ReportMetric(median(ratios), "x_raw")
}

func median(xs []float64) float64 {
	return quantile(xs, 0.5)
}

// quantile is the nearest-rank quantile of xs (sorted in place).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[max(0, min(i, len(xs)-1))]
}

// BenchmarkLookupRTT: one symmetric lookup round trip per op (Lookup is
// RETRY, EndStep sends it, Lookup is polled until HIT), then the request
// ends. Reports the round trip's p50 and p99 and completed lookups/s.
func BenchmarkLookupRTT(b *testing.B) {
	keys := keysOf("lk", 16)
	p, c := benchPair(b, keys)
	rtts := make([]float64, 0, b.N)
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		id := fmt.Sprintf("l%d", i)
		k := keys[i%len(keys)]
		c.m.NewRequest(id, symParams(b, id, p))
		t0 := time.Now()
		if v := c.m.Lookup(id, k); v != Retry {
			b.Fatalf("first lookup = %v", v)
		}
		c.m.EndStep()
		for {
			v := c.m.Lookup(id, k)
			if v == Hit {
				break
			}
			if v == Miss {
				b.Fatal("lookup MISS")
			}
		}
		rtts = append(rtts, float64(time.Since(t0).Nanoseconds())/1e3)
		c.m.RequestFinished(id)
	}
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(quantile(rtts, 0.5), "p50_us")
	b.ReportMetric(quantile(rtts, 0.99), "p99_us")
	b.ReportMetric(float64(b.N)/el.Seconds(), "lookups/s")
}
