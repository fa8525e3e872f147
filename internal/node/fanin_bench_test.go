package node

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/crc32c"
	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/proccpu"
	"github.com/kvp2p/kvp2p/internal/rawbench"
)

// Fan-in: one consumer loading from fanInSources producers at once, each
// its share of rawbench.LoadBytes, against as many plain TCP streams into one
// receiver on the same loopback, interleaved round by round:
//
//	go test -run '^$' -bench FanInVsRaw -benchtime 10x .

const fanInSources = 8

// fanInRig is one consumer with a ready session to each of its producers;
// producer i holds keys[i], rawbench.Blocks/len(ps) blocks.
type fanInRig struct {
	c    *tnode
	ps   []*tnode
	keys [][]Key
	n    int
}

func newFanInRig(b *testing.B, sources int) *fanInRig {
	per := rawbench.Blocks / sources
	mut := func(slots int) func(*Config) {
		return func(cfg *Config) {
			cfg.BlockBytes, cfg.Slots, cfg.Log = rawbench.BlockBytes, slots, nil
		}
	}
	r := &fanInRig{c: startTN(b, nodeOpt{mut: mut(rawbench.Blocks + 16)})}
	for i := range sources {
		p := startTN(b, nodeOpt{mut: mut(max(per, 16))})
		keys := nodetest.Keys(fmt.Sprintf("fan%d", i), per)
		for _, k := range keys {
			if err := p.m.PutBlock(k, rawbench.Bytes(k, rawbench.BlockBytes)); err != nil {
				b.Fatal(err)
			}
		}
		r.ps, r.keys = append(r.ps, p), append(r.keys, keys)
		warmPD(b, r.c, p, keys[0])
	}
	return r
}

// warmPD waits until c's PD lookup of k at p is HIT: the session is up.
func warmPD(b *testing.B, c, p *tnode, k Key) {
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; ; i++ {
		id := fmt.Sprintf("warm-%s-%d", p.PeerID(), i)
		c.m.NewRequest(id, nodetest.PDParams(b, id, p.PeerID()))
		v := c.m.Lookup(id, k)
		c.m.RequestFinished(id)
		if v == Hit {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("no session to %s", p.PeerID())
		}
		<-time.After(time.Millisecond)
	}
}

// load submits one PD load per producer, all before waiting for any, and
// returns the time until every load and every store has its result.
func (r *fanInRig) load(b *testing.B) time.Duration {
	r.n++
	start := time.Now()
	loads := make(map[uint64]bool, len(r.ps))
	stores := make([]uint64, len(r.ps))
	for i, p := range r.ps {
		kv := fmt.Sprintf("fan%d-%d", r.n, i)
		p.m.NewRequest("p"+kv, TransferParams{RemoteDecoder: &Remote{KVRequestID: kv}})
		stores[i], _ = p.m.SubmitStore("p"+kv, r.keys[i])
		r.c.m.NewRequest("d"+kv, nodetest.PDParams(b, kv, p.PeerID()))
		lj, _ := r.c.m.SubmitLoad("d"+kv, r.keys[i])
		loads[lj] = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for len(loads) > 0 {
		for _, res := range r.c.m.WaitFinished(ctx) {
			if loads[res.Job] {
				if !res.OK {
					b.Fatalf("load: %+v", res)
				}
				delete(loads, res.Job)
			}
		}
		if ctx.Err() != nil && len(loads) > 0 {
			b.Fatalf("%d loads without a result within 30 s", len(loads))
		}
	}
	for i, p := range r.ps {
		if res := nodetest.WaitJob(b, p.m, stores[i]); !res.OK {
			b.Fatalf("store: %+v", res)
		}
	}
	el := time.Since(start)
	for i, p := range r.ps {
		kv := fmt.Sprintf("fan%d-%d", r.n, i)
		r.c.m.RequestFinished("d" + kv)
		p.m.RequestFinished("p" + kv)
	}
	return el
}

func (r *fanInRig) check(b *testing.B) {
	for _, keys := range r.keys {
		for _, k := range []Key{keys[0], keys[len(keys)-1]} {
			if got, ok := r.c.m.ReadBlock(k); !ok || string(got) != string(rawbench.Bytes(k, rawbench.BlockBytes)) {
				b.Fatalf("block %x not loaded intact", k[:4])
			}
		}
	}
}

// rawFanIn is n plain TCP streams into one receiver: n writer goroutines,
// each copying its share of rawbench.LoadBytes in block-sized writes, and n
// reader goroutines filling their share of one destination buffer. With
// sum, each reader also checks a CRC32C of every block-sized piece as soon
// as the piece is in (still in cache): the least a receiver that checks
// what it loads must do, with no framing at all.
type rawFanIn struct {
	sum      bool
	wcs      []net.Conn
	src, dst []byte
	startR   []chan struct{} // per stream: a copy starts, the reader's
	startW   []chan struct{} // and the writer's
	got      chan error      // one per stream and copy
	wg       sync.WaitGroup
}

func newRawFanIn(b *testing.B, n int, sum bool) *rawFanIn {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	r := &rawFanIn{sum: sum, src: make([]byte, rawbench.LoadBytes), dst: make([]byte, rawbench.LoadBytes), got: make(chan error, 2*n)}
	for i := range r.src {
		r.src[i] = byte(i >> 8)
	}
	share := rawbench.LoadBytes / n
	for i := range n {
		wc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		rc, err := ln.Accept()
		if err != nil {
			wc.Close()
			b.Fatal(err)
		}
		r.wcs = append(r.wcs, wc)
		startR, startW := make(chan struct{}), make(chan struct{})
		r.startR, r.startW = append(r.startR, startR), append(r.startW, startW)
		dst, src := r.dst[i*share:(i+1)*share], r.src[i*share:(i+1)*share]
		r.wg.Add(2)
		go func() { // the receiver's stream i
			defer r.wg.Done()
			defer rc.Close()
			for range startR {
				if !sum {
					_, err := io.ReadFull(rc, dst)
					r.got <- err
					continue
				}
				r.got <- readSummed(rc, dst)
			}
		}()
		go func() { // sender i: one copy per start
			defer r.wg.Done()
			for range startW {
				var err error
				for off := 0; off < len(src) && err == nil; off += rawbench.BlockBytes {
					_, err = wc.Write(src[off:min(off+rawbench.BlockBytes, len(src))])
				}
				r.got <- err
			}
		}()
	}
	b.Cleanup(func() {
		for i := range r.wcs {
			close(r.startR[i])
			close(r.startW[i])
			r.wcs[i].Close()
		}
		r.wg.Wait()
	})
	return r
}

// readSummed fills dst from rc, each read as large as the socket allows,
// summing every rawbench.BlockBytes piece once it is complete.
func readSummed(rc net.Conn, dst []byte) error {
	var acc uint32
	got, summed := 0, 0
	for got < len(dst) {
		n, err := rc.Read(dst[got:])
		got += n
		for ; summed+rawbench.BlockBytes <= got || (got == len(dst) && summed < got); summed += rawbench.BlockBytes {
			acc ^= crc32c.Checksum(dst[summed:min(summed+rawbench.BlockBytes, len(dst))])
		}
		if err != nil && got < len(dst) {
			return err
		}
	}
	if acc == 0x5eed { // keep the sums: no reader would skip them
		return fmt.Errorf("raw fan-in: unlucky checksum")
	}
	return nil
}

// copy starts every stream and waits for all of them, both ends.
func (r *rawFanIn) copy(b *testing.B) time.Duration {
	start := time.Now()
	for i := range r.wcs {
		r.startR[i] <- struct{}{}
		r.startW[i] <- struct{}{}
	}
	for range 2 * len(r.wcs) {
		if err := <-r.got; err != nil {
			b.Fatal(err)
		}
	}
	el := time.Since(start)
	if string(r.src[:4096]) != string(r.dst[:4096]) || string(r.src[len(r.src)-4096:]) != string(r.dst[len(r.dst)-4096:]) {
		b.Fatal("raw fan-in: bytes differ")
	}
	return el
}

// BenchmarkFanInVsRaw: fanInSources producers load into one consumer at
// once (rawbench.LoadBytes in all, an equal share each), interleaved with as
// many raw TCP streams into one receiver; x_raw is kvp2p's throughput over
// raw TCP's, and *_cpu_s/GB the process CPU each spent per GB.
//
// raw_crc is the same raw streams with the receiver checking a CRC32C of
// every block as it comes in (readSummed): the most a receiver that checks
// what it loads can reach here, where sender, receiver and checksum share
// two cores. x_raw_crc is kvp2p's throughput over that.
func BenchmarkFanInVsRaw(b *testing.B) {
	fr := newFanInRig(b, fanInSources)
	rr, rc := newRawFanIn(b, fanInSources, false), newRawFanIn(b, fanInSources, true)
	phases := []func(*testing.B) time.Duration{fr.load, rr.copy, rc.copy}
	var el, cpu [3]time.Duration
	for _, p := range phases {
		p(b) // warm: sessions, socket buffers, pages
	}
	b.ResetTimer()
	for i := range b.N {
		for k := range phases {
			j := (k + i) % len(phases) // each phase first in turn
			c0, _ := proccpu.Used()
			el[j] += phases[j](b)
			c1, ok := proccpu.Used()
			if ok {
				cpu[j] += c1 - c0
			}
		}
	}
	b.StopTimer()
	mb := float64(b.N) * rawbench.LoadBytes / 1e6
	for j, name := range []string{"kvp2p", "raw", "raw_crc"} {
		b.ReportMetric(mb/el[j].Seconds(), name+"_MB/s")
		if cpu[j] > 0 {
			b.ReportMetric(cpu[j].Seconds()/(mb/1e3), name+"_cpu_s/GB")
		}
	}
	b.ReportMetric(el[1].Seconds()/el[0].Seconds(), "x_raw")
	b.ReportMetric(el[2].Seconds()/el[0].Seconds(), "x_raw_crc")
	fr.check(b)
}
