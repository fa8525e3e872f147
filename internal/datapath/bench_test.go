package datapath

import (
	"io"
	"math/rand/v2"
	"testing"
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
	benchSlots  = 64 // 16 MiB per arena; blocks reuse slots round-robin
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

// BenchmarkRawTCPLoopback moves the same bytes in the same 256 KiB pieces
// with plain conn.Write and io.ReadFull: the ceiling for the datapath.
func BenchmarkRawTCPLoopback(b *testing.B) {
	na, nb := tcpPair(b)
	src, dst := newArena(benchSlots, benchBlock), newArena(benchSlots, benchBlock)
	start, done := make(chan struct{}), make(chan error)
	go func() { // ends when start is closed
		for range start {
			var err error
			for i := 0; i < benchBlocks && err == nil; i++ {
				_, err = io.ReadFull(nb, dst.Slot(uint32(i%benchSlots)))
			}
			done <- err
		}
	}()
	defer func() { close(start); na.Close(); nb.Close() }()
	once := func() {
		start <- struct{}{}
		for i := range benchBlocks {
			if _, err := na.Write(src.Slot(uint32(i % benchSlots))); err != nil {
				b.Fatal(err)
			}
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	once()
	b.SetBytes(benchTotal)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		once()
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
		{Config{BlockBytes: 256 << 10, ChunkBytes: 128 << 10, ProgressInterval: 1 << 62}, 17, 2},
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
