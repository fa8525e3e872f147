package node

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/percentile"
	"github.com/kvp2p/kvp2p/internal/rawbench"
)

// Benchmarks over 127.0.0.1 with real nodes. kvp2p's load path (Manager
// calls through the loop, control messages, CRC32C-checked chunks written
// into arena slots) against a plain TCP copy of the same bytes:
//
//	go test -run '^$' -bench 'Load|Raw|Lookup' -benchtime 3s .

// benchPair starts a producer and a consumer with a ready session and the
// producer holding blocks keys.
func benchPair(b *testing.B, keys []Key, tlsCfg ...func(peerID string) TLSConfig) (p, c *tnode) {
	mut := func(cfg *Config) {
		cfg.BlockBytes, cfg.Slots = rawbench.BlockBytes, max(len(keys), 16)
		cfg.Log = nil
		for _, f := range tlsCfg {
			cfg.TLS = f(cfg.PeerID)
		}
	}
	p = startTN(b, nodeOpt{mut: mut})
	c = startTN(b, nodeOpt{mut: mut})
	for _, k := range keys {
		if err := p.m.PutBlock(k, rawbench.Bytes(k, rawbench.BlockBytes)); err != nil {
			b.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; ; i++ {
		id := fmt.Sprintf("warm-%d", i)
		c.m.NewRequest(id, nodetest.PDParams(b, id, p.PeerID()))
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

// loadRig is a producer and a consumer with a ready session, the producer
// holding rawbench.Blocks blocks.
type loadRig struct {
	p, c *tnode
	keys []Key
	n    int
}

func newLoadRig(b *testing.B) *loadRig {
	keys := nodetest.Keys("bench", rawbench.Blocks)
	p, c := benchPair(b, keys)
	return &loadRig{p: p, c: c, keys: keys}
}

// load moves every block once, PD: SubmitStore and SubmitLoad to both
// results. It returns the time that took.
func (r *loadRig) load(b *testing.B) time.Duration {
	r.n++
	kv := fmt.Sprintf("kv%d", r.n)
	start := time.Now()
	r.p.m.NewRequest("p"+kv, TransferParams{RemoteDecoder: &Remote{KVRequestID: kv}})
	sj, _ := r.p.m.SubmitStore("p"+kv, r.keys)
	r.c.m.NewRequest("d"+kv, nodetest.PDParams(b, kv, r.p.PeerID()))
	lj, _ := r.c.m.SubmitLoad("d"+kv, r.keys)
	if res := nodetest.WaitJob(b, r.c.m, lj); !res.OK {
		b.Fatalf("load: %+v", res)
	}
	if res := nodetest.WaitJob(b, r.p.m, sj); !res.OK {
		b.Fatalf("store: %+v", res)
	}
	el := time.Since(start)
	r.c.m.RequestFinished("d" + kv)
	r.p.m.RequestFinished("p" + kv)
	return el
}

func (r *loadRig) check(b *testing.B) {
	for _, k := range []Key{r.keys[0], r.keys[len(r.keys)-1]} {
		if got, ok := r.c.m.ReadBlock(k); !ok || string(got) != string(rawbench.Bytes(k, rawbench.BlockBytes)) {
			b.Fatalf("block %x not loaded intact", k[:4])
		}
	}
}

// BenchmarkLoadLoopback: one 64 MiB PD load (256 KiB blocks) per op,
// through Manager, from SubmitStore and SubmitLoad to both results.
func BenchmarkLoadLoopback(b *testing.B) {
	r := newLoadRig(b)
	r.load(b) // untimed: the arenas get their pages
	b.SetBytes(rawbench.LoadBytes)
	b.ResetTimer()
	for range b.N {
		r.load(b)
	}
	b.StopTimer()
	r.check(b)
}

// BenchmarkRawTCPLoopback moves the same 64 MiB per op over plain TCP.
func BenchmarkRawTCPLoopback(b *testing.B) {
	r := rawbench.NewRaw(b, rawbench.LoadBytes, rawbench.BlockBytes)
	r.Copy(b)
	b.SetBytes(rawbench.LoadBytes)
	b.ResetTimer()
	for range b.N {
		r.Copy(b)
	}
}

// BenchmarkLoadVsRaw alternates the two, one kvp2p load then one raw copy
// per op, so that both share the machine's noise, and reports each one's
// throughput and kvp2p's as a fraction of raw TCP's (x_raw). ns/op is the
// pair's.
func BenchmarkLoadVsRaw(b *testing.B) {
	lr, rr := newLoadRig(b), rawbench.NewRaw(b, rawbench.LoadBytes, rawbench.BlockBytes)
	rawbench.Interleave(b, rawbench.LoadBytes, "kvp2p", lr.load, "raw", rr.Copy, "x_raw")
	lr.check(b)
}

// BenchmarkLookupRTT: one symmetric lookup round trip per op (Lookup is
// RETRY, EndStep sends it, then the caller waits for HIT), then the request
// ends. poll: Lookup is polled until HIT (each poll a hop into the loop);
// wait: LookupWait parks in the loop until the reply settles it. Reports
// the round trip's p50 and p99 and completed lookups/s.
// every > 0 starts op i no earlier than i*every after the first.
func BenchmarkLookupRTT(b *testing.B) {
	b.Run("ping", benchPingPong)
	for _, mode := range []string{"poll", "wait"} {
		b.Run(mode, func(b *testing.B) { benchLookupRTT(b, mode == "wait", 0) })
	}
	// wait-paced: at most 4000 lookups/s, under the producer's control
	// message limit (ctlRate; 2 messages an op), which the unpaced wait
	// loop runs into: this one measures the round trip, not the limiter.
	b.Run("wait-paced", func(b *testing.B) { benchLookupRTT(b, true, time.Second/4000) })
}

// benchPingPong is the limit LookupRTT is compared with, in the same run: a
// 64-byte round trip over a plain loopback TCP connection, echoed by one
// goroutine (two hand-offs, no framing, no loop).
func benchPingPong(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	echoed := make(chan error, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			echoed <- err
			return
		}
		defer nc.Close()
		_, err = io.Copy(nc, nc)
		echoed <- err
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 64)
	rtts := make([]float64, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if _, err := nc.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(nc, buf); err != nil {
			b.Fatal(err)
		}
		rtts = append(rtts, float64(time.Since(t0).Nanoseconds())/1e3)
	}
	b.StopTimer()
	nc.Close()
	if err := <-echoed; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(percentile.Of(rtts, 50), "p50_us")
	b.ReportMetric(percentile.Of(rtts, 99), "p99_us")
}

func benchLookupRTT(b *testing.B, wait bool, every time.Duration) {
	keys := nodetest.Keys("lk", 16)
	p, c := benchPair(b, keys)
	rtts := make([]float64, 0, b.N)
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		if due := start.Add(time.Duration(i) * every); every > 0 && time.Until(due) > 0 {
			time.Sleep(time.Until(due)) // pacing, outside the measured round trip
		}
		id := fmt.Sprintf("l%d", i)
		k := keys[i%len(keys)]
		c.m.NewRequest(id, nodetest.SymParams(b, id, p.PeerID()))
		t0 := time.Now()
		if v := c.m.Lookup(id, k); v != Retry {
			b.Fatalf("first lookup = %v", v)
		}
		c.m.EndStep()
		for {
			var v Verdict
			if wait {
				v = c.m.LookupWait(ctx, id, k)
			} else {
				v = c.m.Lookup(id, k)
			}
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
	b.ReportMetric(percentile.Of(rtts, 50), "p50_us")
	b.ReportMetric(percentile.Of(rtts, 99), "p99_us")
	b.ReportMetric(float64(b.N)/el.Seconds(), "lookups/s")
}
