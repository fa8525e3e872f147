package datapath

import (
	"sync/atomic"

	"github.com/kvp2p/kvp2p/internal/crc32c"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// Pipelined checksums. A chunk's CRC32C goes in its header, so the writer
// must read the chunk once before the kernel copies it: on a CPU that
// keeps up with the socket, that pass is a fifth to a third of the
// writer's time (the source is cold in cache). The writer therefore
// predicts which chunk it will send after the one it is writing and has a
// helper goroutine sum it while the writev runs. A prediction is only
// used when the next chunk is exactly the one predicted (same job, block,
// offset and length; slots do not change while their job is in flight),
// so a wrong guess costs a wasted sum, never a wrong header.
//
// The reader does the same on its side: it hands a large chunk's check to
// its own helper and reads the next chunk meanwhile (reader.go).
//
// Slot ownership: the writer always collects its helper's result before
// its next write and before it exits, and the reader before any other
// frame and before it exits, so no helper reads a slot after the SendEnd,
// RecvEnd or Closed that releases it.
//
// Cost: a helper only pays where a core would otherwise idle. On this
// project's 2-core test machine, shared by both ends of every loopback
// transfer and by other work, the helpers moved no more bytes per second
// than summing inline (with sumCold) and cost 8-11% more CPU per byte
// (BenchmarkTransferVsRaw, load average ~10). So a Conn runs them only
// when the process has at least helperMinProcs Ps, where one load leaves
// cores to spare.
const helperMinProcs = 4

// Reading ahead: a chunk on the producer side comes cold from memory, and
// the checksum loop, a chain of dependent instructions, does not keep
// enough cache misses in flight to use the memory's bandwidth: it sums
// cold bytes at a fraction of its speed on cached ones. sumCold therefore
// sums in pieces of sumPiece bytes and, before each, loads one byte per
// cache line sumAhead bytes further on. Those loads depend on nothing, so
// the CPU issues them all at once, and the lines are in cache by the time
// the sum gets there. On this project's 2-core test machine that made a
// cold 256 KiB sum 1.2-2.8 times as fast (interleaved microbenchmark,
// memory shared with other work).
const (
	sumPiece = 16 << 10
	sumAhead = 32 << 10
	lineSize = 64
)

// sumCold is wire.CRC32C(p) for p not in cache. The touched bytes go to
// *sink, which its caller owns, so that the loads are not optimised away.
func sumCold(p []byte, sink *byte) uint32 {
	var x byte
	for i := 0; i < min(sumAhead, len(p)); i += lineSize {
		x ^= p[i]
	}
	var sum uint32
	for off := 0; off < len(p); off += sumPiece {
		end := min(off+sumPiece, len(p))
		for i := off + sumAhead; i < min(end+sumAhead, len(p)); i += lineSize {
			x ^= p[i]
		}
		sum = crc32c.Update(sum, p[off:end])
	}
	*sink ^= x
	return sum
}

// sumMin is the smallest chunk worth handing to a helper: below it the
// two channel hand-offs cost about what the sum does.
const sumMin = 64 << 10

// quietKeepalives: a helper is stopped after this many keepalives in a
// row (sent, for the writer's; received, for the reader's). A keepalive
// goes out only after a KeepaliveInterval with nothing else to write, so
// that is a connection idle for that many intervals: an idle session
// keeps no helper goroutines, and a load after it starts them again (a
// goroutine and three channels per helper, per idle spell, never per
// chunk).
const quietKeepalives = 4

// chunkKey names one chunk of one send job: sendJob.seq is unique per
// writer, and (next, off, n) is the chunk within the job's blocks.
type chunkKey struct {
	seq    uint64
	next   int
	off, n int
}

// helper is a goroutine that sums one chunk at a time for the writer or
// the reader that owns it; every field but the channels is the owner's.
type helper struct {
	req  chan []byte // cap 1: at most one sum in flight
	res  chan uint32 // cap 1
	done chan struct{}
	busy bool // a sum is in flight
	cold bool // the bytes come from memory: sumCold (static)
	sink byte // the helper goroutine's, for sumCold
}

func startHelper(cold bool, live *atomic.Int32) *helper {
	h := &helper{req: make(chan []byte, 1), res: make(chan uint32, 1), done: make(chan struct{}), cold: cold}
	live.Add(1)
	go func() {
		defer live.Add(-1)
		h.run()
	}()
	return h
}

func (h *helper) run() {
	defer close(h.done)
	for p := range h.req {
		if h.cold {
			h.res <- sumCold(p, &h.sink)
		} else {
			h.res <- wire.CRC32C(p)
		}
	}
}

// post starts summing p. Nothing may be in flight.
func (h *helper) post(p []byte) {
	h.busy = true
	h.req <- p
}

// wait returns the sum in flight, if any (ok false if none). After wait
// the helper reads no memory.
func (h *helper) wait() (sum uint32, ok bool) {
	if !h.busy {
		return 0, false
	}
	h.busy = false
	return <-h.res, true
}

// stop waits for the sum in flight and for the goroutine to exit.
func (h *helper) stop() {
	h.wait()
	close(h.req)
	<-h.done
}

// summer is the writer's helper and the chunk it is summing.
type summer struct {
	*helper
	key          chunkKey // the chunk in flight, if busy
	hits, misses uint64   // predictions used and wasted (tests)
}

// collect waits for the sum in flight, if any, and returns it if it was
// for k. After collect the helper reads no slot.
func (s *summer) collect(k chunkKey) (uint32, bool) {
	sum, ok := s.wait()
	switch {
	case !ok:
		return 0, false
	case s.key != k:
		s.misses++
		return 0, false
	}
	s.hits++
	return sum, true
}

// predict names the chunk nextChunk will pick after j's chunk of n bytes
// (the one just picked, at ring index w.rr-1), assuming no command comes
// in between; ok is false when none would be left. It mirrors advance,
// unring and nextChunk without changing anything.
func (w *writer) predict(j *sendJob, n int) (c *sendJob, next, off int, ok bool) {
	next, off = j.next, j.off+n
	stays := true
	if off >= w.c.cfg.BlockBytes {
		next, off = next+1, 0
		stays = next < len(j.blocks)
	}
	idx, rr, size := w.rr-1, w.rr, len(w.ring)
	if !stays {
		size-- // advance unrings j, and the turn after it moves down
		rr--
	}
	if size == 0 {
		return nil, 0, 0, false
	}
	if rr >= min(size, w.c.cfg.SendWindow) {
		rr = 0
	}
	if !stays && rr >= idx {
		rr++ // the index in the ring as it is now, j still in it
	}
	if c = w.ring[rr]; c == j {
		return j, next, off, true
	}
	return c, c.next, c.off, true
}

// sumAhead hands the chunk after j's (of n bytes) to the helper, starting
// it on first use, when that chunk is large enough to be worth it.
func (w *writer) sumAhead(j *sendJob, n int) {
	c, next, off, ok := w.predict(j, n)
	if !ok {
		return
	}
	m := min(w.c.cfg.ChunkBytes, w.c.cfg.BlockBytes-off)
	if m < sumMin || w.c.cfg.inlineSums {
		return
	}
	if _, ok := w.stored(c.blocks[next], off, m); ok {
		return // nothing to sum: the block came with it
	}
	if w.sum == nil {
		w.sum = &summer{helper: startHelper(true, &w.c.helpers)}
	}
	w.sum.key = chunkKey{seq: c.seq, next: next, off: off, n: m}
	w.sum.post(w.c.mem.Slot(c.blocks[next].Slot)[off : off+m])
}
