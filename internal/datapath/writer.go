package datapath

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/kvp2p/kvp2p/internal/wire"
)

// sendJob is one producer job, owned by the writer goroutine.
type sendJob struct {
	id        uint64
	seq       uint64    // open order: the ring is kept sorted by it
	blocks    []Block   // blocks[next:] are still to send
	next      int       // index in blocks of the block being sent
	off       int       // bytes of blocks[next] already sent
	last      bool      // no more Sends: Done follows the last block
	started   bool      // a chunk was written
	inRing    bool      // has blocks to send, so it is in writer.ring
	bytes     uint64    // payload bytes written
	lastFrame time.Time // last chunk or Progress frame written for it
}

func (j *sendJob) pending() bool { return j.next < len(j.blocks) }

// ending is a terminal frame in writer.out, to be reported once written.
type ending struct {
	job   uint64
	ok    bool
	bytes uint64
}

// writer owns the write side of the connection. Every field is owned by the
// writer goroutine (run), except c.
type writer struct {
	c *Conn

	jobs   map[uint64]*sendJob // open jobs: queued, sending, or waiting for Send
	ring   []*sendJob          // jobs with blocks to send, oldest first; the first SendWindow are served round-robin
	rr     int                 // next ring index to serve, below the window
	opened uint64              // jobs opened so far: the next sendJob.seq

	cmds []command // taken from c.cmds (the two slices swap)
	acks []uint64  // taken from c.acks

	// out collects frames (control frames, then at most one chunk header)
	// until the next write; ends are the terminal frames in it.
	out  []byte
	ends []ending

	*batchBufs             // nil until the first chunk: an idle session's writer has none
	bufs       net.Buffers // iov for WriteTo, which consumes it

	// Reused message structs: passing a pointer to a field of this
	// long-lived struct to wire.Append does not allocate.
	chunk    wire.Chunk
	progress wire.Progress
	done     wire.Done
	errFrame wire.Error
	probe    wire.Probe
	probeAck wire.ProbeAck

	resumable bool // a write that met its deadline may go on (write)

	lastWrite   time.Time
	progressDue time.Time // earliest time a Progress may be due; zero: no open job
	timer       *time.Timer

	sum        *summer // sums the next chunk during a write (sum.go); nil until a large chunk, and after quietKeepalives
	sink       byte    // for sumCold
	keepalives int     // written in a row
}

func newWriter(c *Conn) *writer {
	// Only the kernel's socket is trusted to go on after a write deadline
	// and to report exactly what a failed write wrote. A layer over it may
	// keep state a timeout corrupts (crypto/tls), or report a timed-out
	// write as writing nothing although it took part of it (the demo's
	// slow link, internal/faultnet): continuing would then send bytes
	// twice. Such a layer judges progress itself (ProgressWriter) or keeps
	// the per-write deadline.
	_, tcp := c.nc.(*net.TCPConn)
	return &writer{c: c, jobs: make(map[uint64]*sendJob), resumable: tcp}
}

// run is the writer goroutine. Each turn takes the queued commands, builds
// the control frames that are due plus at most one chunk header, and writes
// them with the chunk's payload in one writev; with nothing to write it
// waits for a command, a Progress deadline or the keepalive deadline. It
// returns nil when the Conn is closing, else the write error.
func (w *writer) run() error {
	defer w.exit()
	defer func() {
		if w.sum != nil {
			w.sum.stop() // before Closed: the helper may be reading a slot
		}
	}()
	cfg := &w.c.cfg
	w.timer = time.NewTimer(time.Hour)
	defer w.timer.Stop()
	w.lastWrite = time.Now()
	for {
		select {
		case <-w.c.quit:
			return nil
		default:
		}
		w.take()
		now := time.Now()
		for i := range w.cmds {
			w.apply(&w.cmds[i], now)
			w.cmds[i] = command{} // drop the blocks slice
		}
		for _, seq := range w.acks {
			w.probeAck.Seq = seq
			w.appendFrame(&w.probeAck)
		}
		if !w.progressDue.IsZero() && !now.Before(w.progressDue) {
			w.appendProgress(now)
		}
		j, payload := w.nextChunk()
		if len(w.out) == 0 && now.Sub(w.lastWrite) >= cfg.KeepaliveInterval {
			w.probe.Seq = 0
			w.appendFrame(&w.probe)
			w.idle()
		} else if len(w.out) != 0 {
			w.keepalives = 0
		}
		if len(w.out) == 0 {
			if err := w.wait(now); err != nil {
				return nil
			}
			continue
		}
		k := 1
		if j != nil {
			if w.batchBufs == nil {
				w.batchBufs = new(batchBufs)
			}
			w.iov[0], w.iov[1] = w.out, payload
			j, payload, k = w.batch(j, payload, now)
		}
		if err := w.write(k, now); err != nil {
			return err
		}
		if j != nil {
			w.advance(j, len(payload), now)
		}
	}
}

// maxBatch and batchBytes bound the chunks one write carries: a write as
// large as a plain stream's (the consumer reads as much ahead, see
// reader.guess), in a few hundred microseconds.
const (
	maxBatch   = 4
	batchBytes = 1 << 20
)

// batchBufs are one write's buffers: out, the first chunk's payload, then
// the header and payload of each chunk batch adds (hdrs holds those
// headers).
type batchBufs struct {
	iov  [2 * maxBatch][]byte
	hdrs [maxBatch - 1][wire.ChunkHeaderLen]byte
}

// batch adds chunks to the turn's write after the first, j's payload p
// (in iov[1]), while they stay under maxBatch and batchBytes. It returns
// the last chunk's job and payload, which the caller advances once the
// write succeeded, and how many of iov the write takes. Each chunk before
// it is advanced here, before the write: only while that leaves its job
// with blocks queued, as advance would otherwise finish the job (its Done
// must follow the payload) or take it out of the ring.
func (w *writer) batch(j *sendJob, p []byte, now time.Time) (*sendJob, []byte, int) {
	k, total := 2, len(p)
	for i := range w.hdrs {
		if total >= batchBytes || (j.off+len(p) >= w.c.cfg.BlockBytes && j.next+1 >= len(j.blocks)) {
			break
		}
		w.advance(j, len(p), now)
		out := w.out
		w.out = w.hdrs[i][:0]
		nj, np := w.nextChunk() // j is still in the ring: never nil
		w.iov[k], w.iov[k+1] = w.out, np
		w.out = out
		k += 2
		j, p = nj, np
		total += len(np)
	}
	return j, p, k
}

// idle counts a keepalive turn and stops the checksum helper at
// quietKeepalives (sum.go). It has no sum in flight: the writer collects
// each before its next write.
func (w *writer) idle() {
	if w.keepalives++; w.keepalives >= quietKeepalives && w.sum != nil {
		w.sum.stop()
		w.sum = nil
	}
}

// take swaps the command and ack queues out from under c.mu.
func (w *writer) take() {
	c := w.c
	c.mu.Lock()
	w.cmds, c.cmds = c.cmds, w.cmds[:0]
	w.acks, c.acks = c.acks, w.acks[:0]
	c.mu.Unlock()
}

// exit drops what is still queued and refuses further commands.
func (w *writer) exit() {
	c := w.c
	c.mu.Lock()
	c.writerOut = true
	c.cmds, c.acks = nil, nil
	c.mu.Unlock()
}

// wait blocks until a command arrives or a deadline passes; it returns an
// error when the Conn is closing.
func (w *writer) wait(now time.Time) error {
	next := w.lastWrite.Add(w.c.cfg.KeepaliveInterval)
	if !w.progressDue.IsZero() && w.progressDue.Before(next) {
		next = w.progressDue
	}
	w.timer.Reset(max(next.Sub(now), 0))
	select {
	case <-w.c.quit:
		return ErrClosed
	case <-w.c.wake:
	case <-w.timer.C:
	}
	return nil
}

func (w *writer) apply(cmd *command, now time.Time) {
	switch cmd.kind {
	case cmdOpen:
		w.open(cmd.job, now)
	case cmdSend:
		j := w.open(cmd.job, now)
		j.blocks = append(j.blocks, cmd.blocks...)
		j.last = j.last || cmd.last
		if j.pending() && !j.inRing {
			w.enring(j)
		}
		if !j.pending() && j.last {
			w.finish(j, true)
		}
	case cmdCancel:
		if j := w.jobs[cmd.job]; j != nil {
			w.finish(j, false)
		} else if !w.ending(cmd.job) {
			w.appendError(cmd.job, 0)
		}
	case cmdProbe:
		w.probe.Seq = cmd.job
		w.appendFrame(&w.probe)
	}
}

// open returns the job, creating it if new. A new job's first Progress is
// due one ProgressInterval from now.
func (w *writer) open(id uint64, now time.Time) *sendJob {
	if j := w.jobs[id]; j != nil {
		return j
	}
	w.opened++
	j := &sendJob{id: id, seq: w.opened, lastFrame: now}
	w.jobs[id] = j
	due := now.Add(w.c.cfg.ProgressInterval)
	if w.progressDue.IsZero() || due.Before(w.progressDue) {
		w.progressDue = due
	}
	return j
}

// finish forgets the job and appends its terminal frame: Done if ok, else
// Error{ErrAborted}. The job's slots are never read again.
func (w *writer) finish(j *sendJob, ok bool) {
	delete(w.jobs, j.id)
	w.unring(j)
	j.blocks = nil
	if !ok {
		w.appendError(j.id, j.bytes)
		return
	}
	w.done = wire.Done{Job: j.id, Bytes: j.bytes}
	w.appendFrame(&w.done)
	w.ends = append(w.ends, ending{job: j.id, ok: true, bytes: j.bytes})
}

// ending reports whether job's terminal frame is already in out, not yet
// written: a Cancel then has nothing left to do.
func (w *writer) ending(job uint64) bool {
	for _, e := range w.ends {
		if e.job == job {
			return true
		}
	}
	return false
}

func (w *writer) appendError(job, bytes uint64) {
	w.errFrame = wire.Error{Job: job, Code: wire.ErrAborted}
	w.appendFrame(&w.errFrame)
	w.ends = append(w.ends, ending{job: job, ok: false, bytes: bytes})
}

// appendProgress appends a Progress frame for every open job that has been
// silent for ProgressInterval, and computes when the next one is due.
func (w *writer) appendProgress(now time.Time) {
	iv := w.c.cfg.ProgressInterval
	var due time.Time
	for _, j := range w.jobs {
		if now.Sub(j.lastFrame) >= iv {
			// Queued: blocks to send and none sent yet, i.e. waiting for
			// its turn in the send window; a job waiting for blocks
			// (a prefill not done) is not queued.
			w.progress = wire.Progress{Job: j.id, Bytes: j.bytes, Queued: !j.started && j.pending()}
			w.appendFrame(&w.progress)
			j.lastFrame = now
		}
		if d := j.lastFrame.Add(iv); due.IsZero() || d.Before(due) {
			due = d
		}
	}
	w.progressDue = due
}

// nextChunk picks the next job of the window round-robin and appends the
// header of its next chunk to out. It returns the job and the payload,
// straight from the arena, or nil when no job has blocks to send. The
// chunk's CRC32C is the helper's if it predicted this chunk, else summed
// here; then the chunk after it goes to the helper, to be summed during
// this one's write. It is called every turn, so any sum in flight is
// collected before the turn's write.
func (w *writer) nextChunk() (*sendJob, []byte) {
	if len(w.ring) == 0 {
		if w.sum != nil {
			w.sum.wait()
		}
		return nil, nil
	}
	if w.rr >= min(len(w.ring), w.c.cfg.SendWindow) {
		w.rr = 0
	}
	j := w.ring[w.rr]
	w.rr++
	b := j.blocks[j.next]
	n := min(w.c.cfg.ChunkBytes, w.c.cfg.BlockBytes-j.off)
	p := w.c.mem.Slot(b.Slot)[j.off : j.off+n]
	var sum uint32
	ok := false
	if w.sum != nil {
		sum, ok = w.sum.collect(chunkKey{seq: j.seq, next: j.next, off: j.off, n: n})
	}
	if !ok {
		sum, ok = w.stored(b, j.off, n)
	}
	if !ok {
		sum = sumCold(p, &w.sink)
	}
	w.chunk = wire.Chunk{Job: j.id, Block: b.Index, Offset: uint32(j.off), Len: uint32(n), CRC: sum}
	w.out = wire.AppendChunkHeader(w.out, &w.chunk)
	w.sumAhead(j, n)
	return j, p
}

// stored returns the sum the block came with for its chunk [off, off+n),
// if the chunk is exactly one of its sum pieces.
func (w *writer) stored(b Block, off, n int) (uint32, bool) {
	i, ok := w.c.cfg.piece(off, n)
	if !ok || i >= len(b.Sums) {
		return 0, false
	}
	return b.Sums[i], true
}

// advance records that n payload bytes of j's current block were written.
func (w *writer) advance(j *sendJob, n int, now time.Time) {
	j.off += n
	j.bytes += uint64(n)
	j.started = true
	j.lastFrame = now
	if j.off < w.c.cfg.BlockBytes {
		return
	}
	j.off = 0
	j.next++
	if j.pending() {
		return
	}
	// Every queued block is out: leave the ring until the next Send.
	j.blocks, j.next = j.blocks[:0], 0
	if j.last {
		w.finish(j, true) // Done goes out in the next write
		return
	}
	w.unring(j)
}

// enring puts j in the ring at its place in open order. A job that waited
// for more blocks thus keeps its turn ahead of later jobs, rather than
// going behind every job opened since.
func (w *writer) enring(j *sendJob) {
	j.inRing = true
	k := len(w.ring)
	for k > 0 && w.ring[k-1].seq > j.seq {
		k--
	}
	w.ring = append(w.ring, nil)
	copy(w.ring[k+1:], w.ring[k:])
	w.ring[k] = j
	if k < w.rr {
		w.rr++ // the job that was next moved one place up
	}
}

// unring takes j out of the round-robin ring, keeping the turn order.
func (w *writer) unring(j *sendJob) {
	if !j.inRing {
		return
	}
	j.inRing = false
	for k, r := range w.ring {
		if r != j {
			continue
		}
		last := len(w.ring) - 1
		copy(w.ring[k:], w.ring[k+1:])
		w.ring[last] = nil
		w.ring = w.ring[:last]
		if k < w.rr {
			w.rr-- // the job after it moved into its place
		}
		return
	}
}

// appendFrame appends one non-chunk frame to out. The messages the writer
// builds are always within the default limits, so an error is a bug.
func (w *writer) appendFrame(m wire.Message) {
	out, err := wire.Append(w.out, m)
	if err != nil {
		panic(fmt.Sprintf("datapath: encoding %v: %v", m.Type(), err))
	}
	w.out = out
}

// BuffersWriter is a connection that writes several buffers in one go
// more cheaply than one Write each, where net.Buffers cannot see it (it
// uses writev only on the net package's own connections). kvp2p's TLS
// connection is one: the chunk header's record and the payload's records
// then reach the socket in one write, as plain TCP's writev does.
type BuffersWriter interface {
	WriteBuffers(bufs [][]byte) (int64, error)
}

// ProgressWriter is a connection that cannot go on with a write after its
// deadline itself (the writer's way, see write) but can below itself:
// kvp2p's TLS connection continues its socket writes under TLS, where
// crypto/tls never sees the timeout. Start gives it WriteTimeout, so that
// there too a write fails only after WriteTimeout with no byte accepted.
type ProgressWriter interface {
	SetWriteProgress(window time.Duration)
}

// write writes iov[:k] (out, then the chunks' headers and payloads) in
// one writev, and on success reports the terminal frames that were in it.
//
// WriteTimeout bounds a write's silence, not its length (issue 24, slow is
// not dead): on a link slower than a batch per WriteTimeout, with the
// socket buffer full, one writev takes longer than that while the peer
// drains it the whole time. A write that met its deadline having moved
// bytes therefore goes on with the rest under a fresh deadline; only one
// that moved nothing for WriteTimeout fails. So a peer that stops reading
// is given up between one and two WriteTimeouts after its last byte moved.
// That needs a connection that stays usable after a deadline and reports
// exactly what it wrote: the plain TCP socket (newWriter). Any other
// connection is not continued here, and any timeout it reports fails it:
// kvp2p's TLS connection reports one only after a window without
// progress, as it continues below TLS (ProgressWriter); another keeps
// bounding each write (docs/liveness.md).
func (w *writer) write(k int, now time.Time) error {
	c := w.c
	var err error
	if k == 1 {
		p := w.out
		for {
			w.deadline(now)
			var n int
			n, err = c.nc.Write(p)
			if !w.resume(n > 0, err) {
				break
			}
			p, now = p[n:], time.Now()
		}
	} else if bw, ok := c.nc.(BuffersWriter); ok {
		w.deadline(now)
		_, err = bw.WriteBuffers(w.iov[:k])
	} else {
		// WriteTo consumes what it wrote from w.bufs: a continued write
		// takes the rest.
		w.bufs = w.iov[:k]
		for {
			w.deadline(now)
			var n int64
			n, err = w.bufs.WriteTo(c.nc)
			if !w.resume(n > 0, err) {
				break
			}
			now = time.Now()
		}
		w.bufs = nil
	}
	if k > 1 {
		clear(w.iov[:k]) // keep no slot reachable
	}
	if err != nil {
		// If the Conn is closing already this error is a consequence, and
		// fail keeps the first one.
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("datapath: write: %w: nothing written for %v: %w", ErrTimeout, c.cfg.WriteTimeout, err)
		}
		return fmt.Errorf("datapath: write: %w", err)
	}
	w.out = w.out[:0]
	w.lastWrite = now
	for _, e := range w.ends {
		c.emit(SendEnd{Job: e.job, OK: e.ok, Bytes: e.bytes})
	}
	w.ends = w.ends[:0]
	return nil
}

// deadline sets the write deadline one WriteTimeout after now, if any.
func (w *writer) deadline(now time.Time) {
	if t := w.c.cfg.WriteTimeout; t > 0 {
		w.c.nc.SetWriteDeadline(now.Add(t))
	}
}

// resume reports whether a write that ended with err should go on with
// its rest: it met its deadline having moved bytes (progressed), on a
// connection that stays usable after a deadline. The Conn owns nc, so the
// deadline met is the writer's own, never one set to interrupt it (fail
// closes nc instead).
func (w *writer) resume(progressed bool, err error) bool {
	if err == nil || !progressed || !w.resumable || !errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	w.c.resumed.Add(1)
	return true
}
