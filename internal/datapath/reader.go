package datapath

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/kvp2p/kvp2p/internal/wire"
)

// recvJob is one consumer job. Expect creates it and puts it in c.recv;
// from then on only the reader goroutine touches its fields (it finds the
// job under c.rmu, which orders Expect's writes before the reader's reads).
type recvJob struct {
	slots    []uint32 // block i lands in slots[i]
	got      []uint32 // bytes of block i received so far (in order)
	bytes    uint64   // payload bytes received, all blocks
	poisoned bool     // a chunk failed its CRC: later chunks are discarded
	summed   int      // pieces whose sum was written into SlotSums (SumMemory)
	reported bool     // a RecvProgress was emitted for chunk bytes
	lastEmit time.Time
}

// reader owns the read side of the connection: every field is the reader
// goroutine's.
type reader struct {
	c  *Conn
	rd *wire.Reader

	// chk checks the last large chunk's CRC32C while the next one is read
	// (sum.go); nil until a large chunk, and again after quietKeepalives
	// keepalives in a row. pend is the chunk it is checking.
	chk        *helper
	pend       pendingCheck
	keepalives int // received in a row

	guesses *[wire.MaxAhead][]byte // guess's, reused: a chunk allocates nothing; nil until a chunk
}

// pendingCheck is a chunk whose payload is in its slot and whose CRC32C
// the helper is computing; rj == nil when none.
type pendingCheck struct {
	rj  *recvJob
	job uint64
	blk uint32
	sum uint32 // the header's
}

// run is the reader goroutine. It returns why it stopped.
func (r *reader) run() error {
	c := r.c
	defer func() {
		if r.chk != nil {
			r.chk.stop() // before Closed: the helper may be reading a slot
		}
	}()
	for {
		now := time.Now()
		var deadline time.Time
		if c.cfg.ReadTimeout > 0 {
			deadline = now.Add(c.cfg.ReadTimeout)
			c.nc.SetReadDeadline(deadline)
		}
		m, err := r.rd.Next()
		if err != nil {
			if frozen(err, deadline, time.Now()) {
				continue // a fresh deadline: the peer's silence is judged on time this once
			}
			return r.ioErr(err)
		}
		if _, isChunk := m.(*wire.Chunk); !isChunk {
			r.settle() // every other frame sees the chunks before it checked
		}
		r.idle(m)
		switch m := m.(type) {
		case *wire.Chunk:
			err = r.chunk(m)
		case *wire.Progress:
			// Not a protocol error when unknown: harmless, and a peer
			// may race a Progress with a Cancel of an unopened job.
			if rj := c.lookup(m.Job); rj != nil {
				c.emit(RecvProgress{Job: m.Job, Bytes: rj.bytes, Queued: m.Queued})
			}
		case *wire.Done:
			r.end(m.Job, true, m.Bytes)
		case *wire.Error:
			r.end(m.Job, false, 0)
		case *wire.Probe:
			if m.Seq != 0 { // 0 is a keepalive: reading it was the point
				c.pushAck(m.Seq)
			}
		case *wire.ProbeAck:
			c.emit(ProbeAck{Seq: m.Seq})
		default:
			err = fmt.Errorf("%w: %v frame on a data connection", ErrProtocol, m.Type())
		}
		if err != nil {
			return err
		}
	}
}

// chunk validates a chunk against its job and reads its payload straight
// into the destination slot. Nothing is written unless the chunk fits:
// registered job, block in range, offset where the block's bytes stopped,
// end within the block.
func (r *reader) chunk(ch *wire.Chunk) error {
	c := r.c
	job, blk, off, n, sum := ch.Job, ch.Block, ch.Offset, ch.Len, ch.CRC
	rj := c.lookup(job)
	switch {
	case rj == nil:
		return fmt.Errorf("%w: chunk for job %d, which is not expected", ErrProtocol, job)
	case uint64(blk) >= uint64(len(rj.slots)):
		return fmt.Errorf("%w: job %d: chunk for block %d of %d", ErrProtocol, job, blk, len(rj.slots))
	case n == 0:
		return fmt.Errorf("%w: job %d block %d: empty chunk", ErrProtocol, job, blk)
	case off != rj.got[blk]:
		return fmt.Errorf("%w: job %d block %d: chunk at offset %d, want %d", ErrProtocol, job, blk, off, rj.got[blk])
	case uint64(off)+uint64(n) > uint64(c.cfg.BlockBytes):
		return fmt.Errorf("%w: job %d block %d: chunk ends at %d, past block size %d", ErrProtocol, job, blk, uint64(off)+uint64(n), c.cfg.BlockBytes)
	}
	rj.got[blk] += n
	rj.bytes += uint64(n)
	if rj.poisoned {
		if err := r.rd.DiscardPayload(); err != nil {
			return r.ioErr(err)
		}
		return nil
	}
	dst := c.mem.Slot(rj.slots[blk])[off : off+n]
	if err := r.rd.ReadPayloadAhead(dst, r.guess(rj, blk, off+n)); err != nil {
		return r.ioErr(err)
	}
	r.keepSum(rj, blk, off, n, sum)
	// The previous chunk's check ran while this payload was read. If it
	// poisoned this job, this chunk's bytes are garbage in a slot the job
	// still reserves, and need no check.
	r.settle()
	if rj.poisoned {
		return nil
	}
	if int(n) >= sumMin && !c.cfg.inlineChecks {
		if r.chk == nil {
			r.chk = startHelper(false, &c.helpers) // the kernel just wrote dst: it is in cache
		}
		r.pend = pendingCheck{rj: rj, job: job, blk: blk, sum: sum}
		r.chk.post(dst)
		return nil
	}
	r.checked(rj, job, blk, wire.CRC32C(dst) == sum)
	return nil
}

// guess names where the chunks after one that ends at off of block blk
// most likely land: the job's next pieces, each in its own slot, as a
// writer that sends one job's blocks in order sends them, up to
// aheadBytes in all. The reader reads ahead into them
// (wire.Reader.ReadPayloadAhead): the regions are the job's until the
// reader itself ends the job, and nothing of them has arrived yet (got),
// so a guess that misses scribbles only where this job's bytes are still
// to come, and each piece's own chunk overwrites it, checked.
func (r *reader) guess(rj *recvJob, blk, off uint32) [][]byte {
	c := r.c
	if r.guesses == nil {
		r.guesses = new([wire.MaxAhead][]byte)
	}
	g := r.guesses[:0]
	for total := 0; len(g) < len(r.guesses) && total < aheadBytes; {
		if uint64(off) >= uint64(c.cfg.BlockBytes) {
			blk, off = blk+1, 0
		}
		if rj.poisoned || uint64(blk) >= uint64(len(rj.slots)) || rj.got[blk] != off {
			break
		}
		n := min(uint32(c.cfg.ChunkBytes), uint32(c.cfg.BlockBytes)-off)
		g = append(g, c.mem.Slot(rj.slots[blk])[off:off+n])
		total += int(n)
		off += n
	}
	return g
}

// aheadBytes bounds what one read may bring ahead of the payload it
// reads: about what a socket holds when the reader falls behind, so that
// a read is as large as a plain stream's.
const aheadBytes = 1 << 20

// keepSum writes a chunk's sum into its slot's sums when the chunk is
// exactly one sum piece (SumMemory): if the chunk's check fails, the job
// is poisoned and RecvEnd says nothing was summed.
func (r *reader) keepSum(rj *recvJob, blk, off, n, sum uint32) {
	c := r.c
	i, ok := c.cfg.piece(int(off), int(n))
	if !ok || c.sums == nil {
		return
	}
	if sums := c.sums.SlotSums(rj.slots[blk]); i < len(sums) {
		sums[i] = sum
		rj.summed++
	}
}

// idle counts keepalives in a row and stops the checksum helper at
// quietKeepalives (settle has collected its last sum: a keepalive is not a
// chunk).
func (r *reader) idle(m wire.Message) {
	if p, ok := m.(*wire.Probe); !ok || p.Seq != 0 {
		r.keepalives = 0
		return
	}
	if r.keepalives++; r.keepalives >= quietKeepalives && r.chk != nil {
		r.chk.stop()
		r.chk = nil
	}
}

// settle waits for the pending chunk check, if any, and reports it.
func (r *reader) settle() {
	if r.pend.rj == nil {
		return
	}
	p := r.pend
	r.pend = pendingCheck{}
	got, _ := r.chk.wait()
	r.checked(p.rj, p.job, p.blk, got == p.sum)
}

// checked reports a chunk whose CRC32C was checked: a mismatch poisons the
// job (one RecvCorrupt), a match is progress.
func (r *reader) checked(rj *recvJob, job uint64, blk uint32, ok bool) {
	c := r.c
	if rj.poisoned {
		return
	}
	if !ok {
		rj.poisoned = true
		c.emit(RecvCorrupt{Job: job, Block: blk})
		return
	}
	// Coalesce: the first chunk of a job is reported at once, later ones
	// at most every ProgressInterval/4 per job.
	if now := time.Now(); !rj.reported || now.Sub(rj.lastEmit) >= c.cfg.ProgressInterval/4 {
		rj.reported, rj.lastEmit = true, now
		c.emit(RecvProgress{Job: job, Bytes: rj.bytes})
	}
}

// end handles a job's terminal frame: unregister, then report. A terminal
// frame for a job that is not expected is ignored: a Cancel can race a job's
// own end, or name a job this side never registered.
func (r *reader) end(job uint64, done bool, doneBytes uint64) {
	c := r.c
	c.rmu.Lock()
	rj := c.recv[job]
	delete(c.recv, job)
	c.rmu.Unlock()
	if rj == nil {
		return
	}
	want := uint64(len(rj.slots)) * uint64(c.cfg.BlockBytes)
	ok := done && !rj.poisoned && doneBytes == rj.bytes && rj.bytes == want
	summed := ok && rj.summed > 0 && rj.summed == len(rj.slots)*c.cfg.pieces()
	c.emit(RecvEnd{Job: job, OK: ok, Bytes: rj.bytes, Summed: summed, Slots: rj.slots})
}

// lookup finds an expected job. The lock is held only for the map access,
// never across a read: a job's slots stay valid until its RecvEnd or
// Closed, and only the reader removes jobs.
func (c *Conn) lookup(job uint64) *recvJob {
	c.rmu.Lock()
	rj := c.recv[job]
	c.rmu.Unlock()
	return rj
}

// frozenSlack is how late past its read deadline the reader may learn of
// it and still trust it. The runtime wakes a reader within a few
// milliseconds of its deadline; one that wakes this much later did not
// run at the deadline (the process was stopped, SIGSTOP, or starved of
// CPU), and the peer's bytes may be waiting in the socket.
const frozenSlack = 250 * time.Millisecond

// frozen reports whether err is a read deadline that passed while this
// process could not run (issue 24: starvation blames nobody): it learned
// of it at now, at least frozenSlack after the deadline. The wire.Reader
// stays usable after a deadline met between frames; met inside a frame it
// fails for good, and the next Next returns that at once, well before the
// new deadline, so a reader never retries twice for one freeze.
func frozen(err error, deadline, now time.Time) bool {
	return !deadline.IsZero() && errors.Is(err, os.ErrDeadlineExceeded) && now.Sub(deadline) >= frozenSlack
}

// ioErr classifies a read error: a protocol error if the peer sent bytes
// the codec refuses, a timeout, or the I/O error itself. When the Conn is
// closing already (closing nc is how the reader is stopped) the error is a
// consequence, and fail keeps the first one.
func (r *reader) ioErr(err error) error {
	switch {
	case errors.Is(err, wire.ErrVersion), errors.Is(err, wire.ErrTooLarge),
		errors.Is(err, wire.ErrMalformed), errors.Is(err, wire.ErrUnknownType):
		return fmt.Errorf("%w: %w", ErrProtocol, err)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("datapath: read: %w: no frame for %v: %w", ErrTimeout, r.c.cfg.ReadTimeout, err)
	}
	return fmt.Errorf("datapath: read: %w", err)
}
