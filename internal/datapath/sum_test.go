package datapath

import (
	"net"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kvp2p/kvp2p/internal/wire"
)

// TestPredictMatchesNextChunk drives a writer's scheduling by hand (no
// socket) through jobs of several blocks of several chunks, a send window
// of 2 over 3 jobs, a job that runs out of blocks before its last Send and
// one that ends: at every chunk, predict must name the chunk the next
// nextChunk picks.
func TestPredictMatchesNextChunk(t *testing.T) {
	for _, window := range []int{1, 2, 3} {
		cfg := Config{BlockBytes: 1000, ChunkBytes: 300, SendWindow: window} // chunks below sumMin: no helper
		cfg, err := cfg.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		c := &Conn{cfg: cfg, mem: newArena(8, cfg.BlockBytes)}
		w := newWriter(c)
		now := time.Unix(0, 0)
		send := func(job uint64, last bool, slots ...uint32) {
			var bs []Block
			for i, s := range slots {
				bs = append(bs, Block{Index: uint32(i), Slot: s})
			}
			w.apply(&command{kind: cmdSend, job: job, blocks: bs, last: last}, now)
		}
		send(1, true, 0, 1, 2)
		send(2, false, 3)
		send(3, true, 4, 5)
		send(4, true, 6)
		type pick struct {
			seq       uint64
			next, off int
		}
		var want *pick
		chunks, checked := 0, 0
		for {
			j, p := w.nextChunk()
			if j == nil {
				if want != nil {
					t.Fatalf("window %d: predicted job %d, got none", window, want.seq)
				}
				break
			}
			got := pick{j.seq, j.next, j.off}
			if want != nil {
				if got != *want {
					t.Fatalf("window %d, chunk %d: predicted %+v, picked %+v", window, chunks, *want, got)
				}
				checked++
			}
			want = nil
			if c2, next, off, ok := w.predict(j, len(p)); ok {
				want = &pick{c2.seq, next, off}
			}
			w.out = w.out[:0]
			w.advance(j, len(p), now)
			chunks++
		}
		if chunks != 7*4 || checked != chunks-1 {
			t.Fatalf("window %d: %d chunks, %d predictions checked; want 28 and 27", window, chunks, checked)
		}
	}
}

// TestSumAheadUsed: over a real connection with chunks large enough for
// the helper, two jobs interleaved round-robin arrive intact (every CRC
// checked by the reader) and the helper's sums are used for nearly every
// chunk but the first of each transfer.
func TestSumAheadUsed(t *testing.T) {
	cfg := Config{BlockBytes: 256 << 10, ChunkBytes: 128 << 10, forceHelpers: true}
	l := newLoopback(t, cfg, 16)
	for job := uint64(1); job <= 2; job++ {
		var blocks []Block
		var slots []uint32
		for i := range 8 {
			s := uint32(i) + uint32(job-1)*8
			blocks, slots = append(blocks, Block{Index: uint32(i), Slot: s}), append(slots, s)
		}
		l.cons.Expect(job, slots)
		l.prod.Send(job, blocks, true)
	}
	for range 2 {
		if e := <-l.consEv.ends; !e.OK {
			t.Fatalf("transfer failed: %+v", e)
		}
	}
	l.stop()
	for s := range uint32(16) {
		if string(l.src.Slot(s)) != string(l.dst.Slot(s)) {
			t.Fatalf("slot %d differs", s)
		}
	}
	s := l.prod.w.sum // the writer has exited: Done orders its writes before this read
	if s == nil || l.cons.r.chk == nil {
		t.Fatal("no helper was started for 128 KiB chunks")
	}
	t.Logf("helper sums used %d, wasted %d", s.hits, s.misses)
	// 32 chunks: the first is summed inline and each later one predicted.
	// One guess may be wasted: when the second job's Send reaches the
	// writer after it predicted the first job's next chunk, round-robin
	// turns to the second job instead. And when that Send reaches it only
	// after the first job's last chunk (a scheduler's whim: the consumer
	// reads fast enough for the writer to stream the first job's 2 MiB
	// first), the second job starts like the first, summed inline.
	if n := s.hits + s.misses; n < 30 || n > 31 || s.misses > 1 {
		t.Errorf("helper sums used %d, wasted %d; want 30 or 31 in all, at most 1 wasted", s.hits, s.misses)
	}
}

// TestNoHelperForSmallChunks: chunks under sumMin are summed and checked
// inline, so a connection that only moves small chunks runs no helper.
func TestNoHelperForSmallChunks(t *testing.T) {
	l := newLoopback(t, Config{BlockBytes: 64 << 10, ChunkBytes: 16 << 10, forceHelpers: true}, 4)
	l.run(t, 4)
	l.stop()
	if l.prod.w.sum != nil || l.cons.r.chk != nil {
		t.Error("a helper was started for 16 KiB chunks")
	}
}

// TestSumColdIsCRC32C: reading ahead changes nothing in the sum, for sizes
// around the piece and read-ahead boundaries and a chunk's.
func TestSumColdIsCRC32C(t *testing.T) {
	p := make([]byte, 300<<10)
	pattern(p, 3, 4)
	var sink byte
	for _, n := range []int{0, 1, 63, 64, 65, sumPiece - 1, sumPiece, sumPiece + 1, sumAhead, sumAhead + sumPiece + 7, 128 << 10, 256 << 10, len(p)} {
		if got, want := sumCold(p[:n], &sink), wire.CRC32C(p[:n]); got != want {
			t.Errorf("%d bytes: sumCold %#x, CRC32C %#x", n, got, want)
		}
		if got, want := sumCold(p[len(p)-n:], &sink), wire.CRC32C(p[len(p)-n:]); got != want {
			t.Errorf("last %d bytes: sumCold %#x, CRC32C %#x", n, got, want)
		}
	}
}

// BenchmarkSumCold sums 256 KiB chunks of a 256 MiB buffer (far beyond
// the caches), one chunk with wire.CRC32C and the next with sumCold per
// op, and reports each one's MB/s.
//
//	go test -run '^$' -bench SumCold -count 5 ./internal/datapath
func BenchmarkSumCold(b *testing.B) {
	const chunk = 256 << 10
	p := make([]byte, 256<<20)
	pattern(p[:chunk], 1, 1)
	for off := chunk; off < len(p); off += chunk {
		copy(p[off:], p[:chunk])
	}
	var sink byte
	var el [2]time.Duration
	i := 0
	b.ResetTimer()
	for b.Loop() {
		for k := range el {
			q := p[(i%(len(p)/chunk))*chunk:][:chunk]
			i++
			t0 := time.Now()
			if k == 0 {
				_ = wire.CRC32C(q)
			} else {
				_ = sumCold(q, &sink)
			}
			el[k] += time.Since(t0)
		}
	}
	mb := float64(b.N) * chunk / 1e6
	b.ReportMetric(mb/el[0].Seconds(), "plain_MB/s")
	b.ReportMetric(mb/el[1].Seconds(), "ahead_MB/s")
}

// TestHelpersNeedSpareCores: below helperMinProcs Ps a Conn sums and checks
// inline, even for large chunks; forceHelpers overrides that.
func TestHelpersNeedSpareCores(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	cfg, err := Config{BlockBytes: 256 << 10}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.inlineSums || !cfg.inlineChecks {
		t.Error("helpers on with 2 Ps")
	}
	if cfg, _ = (Config{BlockBytes: 256 << 10, forceHelpers: true}).withDefaults(); cfg.inlineSums || cfg.inlineChecks {
		t.Error("forceHelpers did not turn the helpers on")
	}
	runtime.GOMAXPROCS(helperMinProcs)
	if cfg, _ = (Config{BlockBytes: 256 << 10}).withDefaults(); cfg.inlineSums || cfg.inlineChecks {
		t.Errorf("helpers off with %d Ps", helperMinProcs)
	}
}

// TestHelpersStopWhenIdle: the checksum helpers a load started (the
// producer's writer's, the consumer's reader's) run until quietKeepalives
// keepalives in a row have gone by, not one fewer, and a later load starts
// them again.
func TestHelpersStopWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		na, nb := net.Pipe()
		const every = 100 * time.Millisecond
		cfg := Config{BlockBytes: sumMin, ChunkBytes: sumMin, KeepaliveInterval: every, forceHelpers: true}
		a := startPeer(t, na, cfg, 4)
		b := startPeer(t, nb, cfg, 4)
		defer a.stop(t)
		defer b.stop(t)
		helpers := func() [2]int32 { return [2]int32{a.c.helpers.Load(), b.c.helpers.Load()} }
		for round := range 2 {
			j := job{id: uint64(round + 1), src: seq(0, 4), dst: seq(0, 4)}
			j.prepare(a, b)
			a.c.Open(j.id)
			a.c.Send(j.id, j.blocks(0, 4), true)
			j.verify(t, a, b) // the last write was now: time stands still while goroutines run
			synctest.Wait()
			if got := helpers(); got != [2]int32{1, 1} {
				t.Fatalf("round %d, after the load: helpers (producer, consumer) %v, want [1 1]", round, got)
			}
			time.Sleep((quietKeepalives-1)*every + every/2)
			synctest.Wait()
			if got := helpers(); got != [2]int32{1, 1} {
				t.Fatalf("round %d, after %d keepalives: helpers %v, want [1 1]", round, quietKeepalives-1, got)
			}
			time.Sleep(every)
			synctest.Wait()
			if got := helpers(); got != [2]int32{0, 0} {
				t.Fatalf("round %d, after %d keepalives: helpers %v, want [0 0]", round, quietKeepalives, got)
			}
		}
	})
}
