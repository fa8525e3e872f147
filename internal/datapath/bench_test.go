package datapath

import (
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/proccpu"
)

// endsOnly is an emit that keeps only RecvEnd (on a channel) and Closed, so
// that a long benchmark does not accumulate events.
type endsOnly struct {
	ends   chan RecvEnd
	closed chan error
}

func newEndsOnly() *endsOnly {
	return &endsOnly{ends: make(chan RecvEnd, 16), closed: make(chan error, 1)}
}

func (e *endsOnly) emit(ev Event) {
	switch x := ev.(type) {
	case RecvEnd:
		e.ends <- x
	case Closed:
		e.closed <- x.Err
	}
}

// loopback is a producer and a consumer Conn over 127.0.0.1 TCP, with
// arenas of slots blocks each.
type loopback struct {
	prod, cons     *Conn
	src, dst       *arena
	prodEv, consEv *endsOnly
	blocks         []Block
	dstSlots       []uint32
	job            uint64
}

func newLoopback(tb testing.TB, cfg Config, slots int) *loopback {
	na, nb := tcpPair(tb)
	l := &loopback{
		src: newArena(slots, cfg.BlockBytes), dst: newArena(slots, cfg.BlockBytes),
		prodEv: newEndsOnly(), consEv: newEndsOnly(),
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range slots {
		p := l.src.Slot(uint32(i))
		for k := range p {
			p[k] = byte(rng.Uint32())
		}
	}
	var err error
	if l.prod, err = Start(na, cfg, l.src, l.prodEv.emit); err != nil {
		tb.Fatal(err)
	}
	if l.cons, err = Start(nb, cfg, l.dst, l.consEv.emit); err != nil {
		tb.Fatal(err)
	}
	return l
}

// run transfers one job of n blocks (slot i%slots to slot i%slots).
func (l *loopback) run(tb testing.TB, n int) {
	l.job++
	l.blocks, l.dstSlots = l.blocks[:0], l.dstSlots[:0]
	for i := range n {
		s := uint32(i % l.src.n)
		l.blocks = append(l.blocks, Block{Index: uint32(i), Slot: s})
		l.dstSlots = append(l.dstSlots, s)
	}
	l.cons.Expect(l.job, l.dstSlots)
	l.prod.Send(l.job, l.blocks, true)
	if e := <-l.consEv.ends; !e.OK || e.Job != l.job {
		tb.Fatalf("transfer failed: %+v", e)
	}
}

func (l *loopback) stop() {
	l.prod.Close()
	l.cons.Close()
	<-l.prod.Done()
	<-l.cons.Done()
}

const (
	benchBlock  = 256 << 10
	benchTotal  = 64 << 20
	benchBlocks = benchTotal / benchBlock
	benchSlots  = 256 // 64 MiB per arena, beyond the caches, as a real arena is
)

// BenchmarkTransferLoopback streams 64 MiB per op as one job of 256 blocks
// of 256 KiB (one 256 KiB chunk each) through the datapath over TCP.
func BenchmarkTransferLoopback(b *testing.B) {
	l := newLoopback(b, Config{BlockBytes: benchBlock, ChunkBytes: benchBlock}, benchSlots)
	defer l.stop()
	l.run(b, benchBlocks) // warm up buffers
	b.SetBytes(benchTotal)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		l.run(b, benchBlocks)
	}
}

// rawLoop moves benchTotal bytes in benchBlock pieces with plain
// conn.Write and io.ReadFull between two arenas: the ceiling for the
// datapath.
type rawLoop struct {
	na, nb   net.Conn
	src, dst *arena
	start    chan struct{}
	done     chan error
}

func newRawLoop(tb testing.TB) *rawLoop {
	r := &rawLoop{src: newArena(benchSlots, benchBlock), dst: newArena(benchSlots, benchBlock),
		start: make(chan struct{}), done: make(chan error)}
	r.na, r.nb = tcpPair(tb)
	go func() { // ends when start is closed
		for range r.start {
			var err error
			for i := 0; i < benchBlocks && err == nil; i++ {
				_, err = io.ReadFull(r.nb, r.dst.Slot(uint32(i%benchSlots)))
			}
			r.done <- err
		}
	}()
	return r
}

func (r *rawLoop) once(tb testing.TB) {
	r.start <- struct{}{}
	for i := range benchBlocks {
		if _, err := r.na.Write(r.src.Slot(uint32(i % benchSlots))); err != nil {
			tb.Fatal(err)
		}
	}
	if err := <-r.done; err != nil {
		tb.Fatal(err)
	}
}

func (r *rawLoop) stop() {
	close(r.start)
	r.na.Close()
	r.nb.Close()
}

// BenchmarkRawTCPLoopback moves the same bytes in the same 256 KiB pieces
// with plain conn.Write and io.ReadFull: the ceiling for the datapath.
func BenchmarkRawTCPLoopback(b *testing.B) {
	r := newRawLoop(b)
	defer r.stop()
	r.once(b)
	b.SetBytes(benchTotal)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		r.once(b)
	}
}

// BenchmarkTransferVsRaw runs, per op, one 64 MiB transfer with both
// checksum helpers (ahead), one with the writer's only (sendonly), one
// with every CRC32C summed and checked inline, and one raw TCP copy, in
// turn, so that all four share the machine's noise. It reports each one's
// MB/s and process CPU-s per GB, and each transfer's throughput over raw's.
//
//	go test -run '^$' -bench TransferVsRaw -benchtime 20x ./internal/datapath
func BenchmarkTransferVsRaw(b *testing.B) {
	cfg := Config{BlockBytes: benchBlock, ChunkBytes: benchBlock, forceHelpers: true}
	ahead := newLoopback(b, cfg, benchSlots)
	defer ahead.stop()
	cfg.inlineChecks = true
	sendOnly := newLoopback(b, cfg, benchSlots)
	defer sendOnly.stop()
	cfg.inlineSums = true
	inline := newLoopback(b, cfg, benchSlots)
	defer inline.stop()
	raw := newRawLoop(b)
	defer raw.stop()
	runs := []func(){
		func() { ahead.run(b, benchBlocks) },
		func() { sendOnly.run(b, benchBlocks) },
		func() { inline.run(b, benchBlocks) },
		func() { raw.once(b) },
	}
	var wall, cpu [4]time.Duration
	for _, f := range runs {
		f() // warm: buffers, windows, the helper
	}
	b.ResetTimer()
	for range b.N {
		for i, f := range runs {
			c0, _ := proccpu.Used()
			t0 := time.Now()
			f()
			wall[i] += time.Since(t0)
			c1, _ := proccpu.Used()
			cpu[i] += c1 - c0
		}
	}
	b.StopTimer()
	gb := float64(b.N) * benchTotal / 1e9
	for i, name := range []string{"ahead", "sendonly", "inline", "raw"} {
		b.ReportMetric(gb*1e3/wall[i].Seconds(), name+"_MB/s")
		b.ReportMetric(cpu[i].Seconds()/gb, name+"_cpu_s/GB")
		if i < 3 {
			b.ReportMetric(wall[3].Seconds()/wall[i].Seconds(), name+"/raw")
		}
	}
}

// TestSteadyStateAllocs: a chunk costs no allocation on either side. It
// compares the allocations of a 1-block job and a many-block job; the
// difference is the extra chunks' worth. Large chunks go through the
// checksum helper (sum.go), small ones do not.
func TestSteadyStateAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, tc := range []struct {
		cfg    Config
		blocks int // of the big job
		chunks int // per block
	}{
		{Config{BlockBytes: 64 << 10, ChunkBytes: 16 << 10, ProgressInterval: 1 << 62}, 65, 4},
		{Config{BlockBytes: 256 << 10, ChunkBytes: 128 << 10, ProgressInterval: 1 << 62, forceHelpers: true}, 17, 2},
	} {
		l := newLoopback(t, tc.cfg, 16)
		l.run(t, tc.blocks)
		small := testing.AllocsPerRun(20, func() { l.run(t, 1) })
		big := testing.AllocsPerRun(20, func() { l.run(t, tc.blocks) })
		l.stop()
		perChunk := (big - small) / float64((tc.blocks-1)*tc.chunks)
		t.Logf("chunk %d: allocs per job: 1 block %.1f, %d blocks %.1f; per chunk %.3f", tc.cfg.ChunkBytes, small, tc.blocks, big, perChunk)
		if perChunk > 0.05 {
			t.Errorf("chunk %d: %.3f allocations per chunk, want 0", tc.cfg.ChunkBytes, perChunk)
		}
		if tc.cfg.ChunkBytes >= sumMin && l.prod.w.sum == nil {
			t.Errorf("chunk %d: the checksum helper never ran", tc.cfg.ChunkBytes)
		}
	}
}
