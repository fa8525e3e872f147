package datapath

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvp2p/kvp2p/internal/wire"
)

// Sentinel errors carried (wrapped) by Closed.Err. Any other Closed.Err is an
// I/O error from the connection: the peer reset or closed it (io.EOF,
// io.ErrUnexpectedEOF, ECONNRESET, ...).
var (
	// ErrClosed: Close was called on this side.
	ErrClosed = errors.New("datapath: closed")
	// ErrProtocol: the peer sent something this side cannot accept: a frame
	// the wire codec refuses, a chunk for a job that was never expected (or
	// already ended), a chunk that does not fit its slot or arrives out of
	// order, or a control-plane message on a data connection.
	ErrProtocol = errors.New("datapath: protocol error")
	// ErrTimeout: nothing arrived for Config.ReadTimeout, or a write moved
	// no byte for Config.WriteTimeout (the peer stopped draining).
	ErrTimeout = errors.New("datapath: timeout")
)

// Memory is the arena the data path reads from and writes into. Slot returns
// the bytes of slot i, exactly Config.BlockBytes long. It is called from the
// loop goroutine (Send, Expect check the length) and from the Conn's reader
// and writer goroutines, concurrently: it must be safe for that, and the
// slice of a slot must stay the same while the slot is in use.
type Memory interface {
	Slot(i uint32) []byte
}

// SumMemory is a Memory that keeps each slot's CRC32Cs, one per SumPiece
// (store.SlotSums). The reader of a Conn on a SumMemory writes into
// SlotSums(s) the sum of every chunk of a load that is exactly one piece
// of its block, before checking it, and RecvEnd.Summed says whether every
// piece of every block of the job was written so and checked. SlotSums is
// called from the reader's goroutine: it must read nothing the owner
// changes, and the sums of a slot are the reader's while it may write the
// slot's bytes.
type SumMemory interface {
	Memory
	SlotSums(i uint32) []uint32 // nil: no sums for this slot
}

// Config tunes one Conn. Zero fields take the defaults named in their
// comments; BlockBytes is required.
type Config struct {
	// BlockBytes is the size of every block and of every arena slot.
	BlockBytes int
	// ChunkBytes is the largest payload of one Chunk frame (default 256 KiB,
	// at most wire.DefaultLimits().MaxChunk). A block larger than this is
	// split into several chunks.
	ChunkBytes int
	// ProgressInterval: the writer sends a Progress frame for every open job
	// (queued, or waiting for more blocks) that has had no chunk or Progress
	// frame for this long (default 100 ms). The reader coalesces chunk
	// progress into at most one RecvProgress per job per ProgressInterval/4.
	ProgressInterval time.Duration
	// KeepaliveInterval: the writer sends a keepalive (wire.Probe{Seq: 0},
	// never answered) when nothing else was written for this long
	// (default 500 ms). It must be well below the peer's ReadTimeout.
	KeepaliveInterval time.Duration
	// ReadTimeout: the reader gives up, and closes the Conn with ErrTimeout,
	// when no frame at all arrives for this long (default 2 s). Negative
	// means no read timeout.
	ReadTimeout time.Duration
	// WriteTimeout bounds how long a write to the socket may move no byte
	// (default 2 s): a write that takes longer but keeps moving bytes goes
	// on (a slow link is not a dead peer), except over a layer such as TLS
	// that does not survive a write timeout, where it bounds each write.
	// Negative means none.
	WriteTimeout time.Duration
	// UserTimeout is set as TCP_USER_TIMEOUT on a *net.TCPConn (Linux only),
	// so that unacknowledged data fails the socket after this long
	// (default 2 s). Negative means leave the kernel's default. Ignored for
	// other kinds of connection.
	UserTimeout time.Duration
	// SendWindow is how many producer jobs the writer streams at once,
	// chunk by chunk round-robin (default 2). Later jobs wait their turn
	// in the order they were opened (with Progress{Queued: true} frames), so
	// that under load jobs finish one after another at the link's speed
	// instead of all together at the end: with every job served at once,
	// n jobs of equal size all take n times as long. Two, not one, so
	// that a small job is not stuck behind one large one.
	SendWindow int
	// Limits bound what the reader accepts (default wire.DefaultLimits()).
	Limits wire.Limits
	// SumPiece is the bytes each Block.Sums entry covers: entry i is the
	// CRC32C of slot bytes [i*SumPiece, min((i+1)*SumPiece, BlockBytes)).
	// 0 (the default) ignores Block.Sums. The sums are used only for
	// chunks that are exactly one piece, which every chunk is when
	// SumPiece equals ChunkBytes.
	SumPiece int

	// inlineSums and inlineChecks turn off the writer's and the reader's
	// checksum helper (sum.go): every CRC32C is summed (checked) by the
	// writer (reader) itself. withDefaults sets both below helperMinProcs
	// Ps unless forceHelpers, which tests and benchmarks use to run the
	// helpers on any machine.
	inlineSums, inlineChecks, forceHelpers bool
}

// piece reports whether the chunk [off, off+n) of a block is exactly one
// sum piece, and which (the writer sends that piece's stored sum, the
// reader keeps the sum it checked); never with SumPiece 0.
func (c Config) piece(off, n int) (int, bool) {
	p := c.SumPiece
	if p == 0 || off%p != 0 || n != min(p, c.BlockBytes-off) {
		return 0, false
	}
	return off / p, true
}

// pieces is how many sum pieces a block has (0 with SumPiece 0).
func (c Config) pieces() int {
	if c.SumPiece == 0 {
		return 0
	}
	return (c.BlockBytes + c.SumPiece - 1) / c.SumPiece
}

// withDefaults returns c with zero fields set and checks it.
func (c Config) withDefaults() (Config, error) {
	if c.ChunkBytes == 0 {
		c.ChunkBytes = 256 << 10
	}
	if c.ProgressInterval == 0 {
		c.ProgressInterval = 100 * time.Millisecond
	}
	if c.KeepaliveInterval == 0 {
		c.KeepaliveInterval = 500 * time.Millisecond
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = 2 * time.Second
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 2 * time.Second
	}
	if c.UserTimeout == 0 {
		c.UserTimeout = 2 * time.Second
	}
	if c.SendWindow == 0 {
		c.SendWindow = 2
	}
	if c.Limits == (wire.Limits{}) {
		c.Limits = wire.DefaultLimits()
	}
	if !c.forceHelpers && runtime.GOMAXPROCS(0) < helperMinProcs {
		c.inlineSums, c.inlineChecks = true, true
	}
	def := wire.DefaultLimits()
	switch {
	case c.BlockBytes <= 0:
		return c, fmt.Errorf("datapath: BlockBytes %d must be positive", c.BlockBytes)
	case uint64(c.BlockBytes) > uint64(def.MaxBlockSize) || uint64(c.BlockBytes) > uint64(c.Limits.MaxBlockSize):
		return c, fmt.Errorf("datapath: BlockBytes %d over MaxBlockSize", c.BlockBytes)
	case c.ChunkBytes <= 0 || uint64(c.ChunkBytes) > uint64(def.MaxChunk):
		return c, fmt.Errorf("datapath: ChunkBytes %d not in 1..%d", c.ChunkBytes, def.MaxChunk)
	case c.SumPiece < 0:
		return c, fmt.Errorf("datapath: negative SumPiece %d", c.SumPiece)
	case c.SendWindow < 0:
		return c, fmt.Errorf("datapath: negative SendWindow %d", c.SendWindow)
	case c.ProgressInterval < 0 || c.KeepaliveInterval < 0:
		return c, fmt.Errorf("datapath: negative ProgressInterval or KeepaliveInterval")
	}
	return c, nil
}

// Block is one block for the writer to send.
type Block struct {
	Index uint32 // the block's index in the consumer's fetch (Chunk.Block)
	Slot  uint32 // the local source slot
	// Sums, if not nil, holds the CRC32C of each Config.SumPiece bytes of
	// the slot, taken when the block was stored (store.Sums): a chunk that
	// is exactly one piece goes out with its piece's sum instead of one
	// summed from the slot now. Like the slot, Sums must stay unchanged
	// until SendEnd. A sum that does not match the bytes fails the load
	// at the consumer (RecvCorrupt), as a flipped bit in transit does.
	Sums []uint32
}

// Event is what a Conn reports through its emit callback: SendEnd,
// RecvProgress, RecvCorrupt, RecvEnd, ProbeAck or Closed.
type Event interface{ isEvent() }

// SendEnd (producer side): the writer wrote the job's terminal frame, Done
// if OK, else Error. It will never read the job's source slots again. Bytes
// is the payload written for the job.
type SendEnd struct {
	Job   uint64
	OK    bool
	Bytes uint64
}

// RecvProgress (consumer side): chunk bytes of the job landed in its slots,
// or the producer sent a Progress frame (Queued is then the frame's flag).
// Bytes is what this side has received for the job so far.
type RecvProgress struct {
	Job    uint64
	Bytes  uint64
	Queued bool
}

// RecvCorrupt (consumer side): a chunk of block Block failed its CRC32C.
// The job is poisoned: its later chunks are discarded, its RecvEnd is not
// OK. Emitted at most once per job.
type RecvCorrupt struct {
	Job   uint64
	Block uint32
}

// RecvEnd (consumer side): the job's terminal frame arrived. OK only if it
// was Done, Done.Bytes equals the bytes received and len(slots)*BlockBytes,
// every block arrived whole and in order, and no chunk failed its CRC. After
// this event the reader never writes into the job's slots again.
type RecvEnd struct {
	Job   uint64
	OK    bool
	Bytes uint64
	// Summed (only when OK, on a SumMemory): every piece of every block
	// arrived as exactly one chunk, whose checked CRC32C the reader wrote
	// into SlotSums. Slots are the job's, as given to Expect.
	Summed bool
	Slots  []uint32
}

// ProbeAck: the peer answered Probe(Seq).
type ProbeAck struct{ Seq uint64 }

// Closed: both goroutines have exited. The reader will never write into any
// slot again and the writer will never read one. Jobs without a SendEnd or
// RecvEnd are over and did not succeed. Exactly one per Conn, and the last
// event. Err wraps ErrClosed, ErrProtocol, ErrTimeout, or is the I/O error.
type Closed struct{ Err error }

func (SendEnd) isEvent()      {}
func (RecvProgress) isEvent() {}
func (RecvCorrupt) isEvent()  {}
func (RecvEnd) isEvent()      {}
func (ProbeAck) isEvent()     {}
func (Closed) isEvent()       {}

// Conn moves block bytes between one data connection and the arena. Its
// methods are meant for one goroutine (the node's loop) but are safe for
// concurrent use; none blocks on the network.
type Conn struct {
	// Static after Start.
	nc   net.Conn
	cfg  Config
	mem  Memory
	sums SumMemory // mem, if it keeps sums; else nil
	emit func(Event)
	wake chan struct{} // cap 1: the writer has commands to look at
	quit chan struct{} // closed by fail: both goroutines stop
	done chan struct{} // closed after Closed was emitted

	// Guarded by mu (the writer's command queue). Lock order: mu and rmu
	// are never held together, and neither is held across I/O or emit.
	mu        sync.Mutex
	cmds      []command
	acks      []uint64 // ProbeAcks the reader asked for, oldest first
	ackDrops  uint64   // acks dropped because more than maxAcks were pending
	writerOut bool     // the writer has exited; commands are dropped

	// Guarded by rmu: jobs registered by Expect, read by the reader.
	rmu  sync.Mutex
	recv map[uint64]*recvJob

	failOnce sync.Once
	err      error        // first error; written once in fail, read after quit
	live     atomic.Int32 // goroutines still running; the last emits Closed
	helpers  atomic.Int32 // checksum helpers running (sum.go): tests read it
	resumed  atomic.Int64 // writes continued after their deadline (writer.resume): tests read it

	w *writer // owned by the writer goroutine
	r *reader // owned by the reader goroutine
}

// maxAcks bounds the ProbeAcks waiting for the writer, so a peer flooding
// probes cannot grow memory; the oldest are dropped (counted in ackDrops).
const maxAcks = 64

type cmdKind uint8

const (
	cmdOpen cmdKind = iota
	cmdSend
	cmdCancel
	cmdProbe
)

type command struct {
	kind   cmdKind
	last   bool
	job    uint64 // or probe seq
	blocks []Block
}

// Start takes over nc and starts its reader and writer goroutines. emit is
// called from those goroutines, possibly concurrently, for every Event; it
// must not call back into the Conn, and it may block briefly (blocking
// stalls that direction of the connection). It returns an error, without
// touching nc, only for a bad cfg.
func Start(nc net.Conn, cfg Config, mem Memory, emit func(Event)) (*Conn, error) {
	return StartWithReader(nc, nil, cfg, mem, emit)
}

// StartWithReader is Start for a connection whose first frames (DataAttach)
// were already read through rd: rd may hold buffered bytes of the frames
// that follow, so the Conn must keep reading through it. rd must read nc.
// A nil rd makes a new Reader with cfg.Limits.
func StartWithReader(nc net.Conn, rd *wire.Reader, cfg Config, mem Memory, emit func(Event)) (*Conn, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if rd == nil {
		rd = wire.NewReader(nc, cfg.Limits)
	}
	raw := nc
	if u, ok := nc.(interface{ NetConn() net.Conn }); ok {
		raw = u.NetConn() // a *tls.Conn: the socket under it
	}
	if tc, ok := raw.(*net.TCPConn); ok && cfg.UserTimeout > 0 {
		// Best effort: a socket that refuses it still works, it just
		// detects a dead peer later (read timeout and keepalives still do).
		_ = setUserTimeout(tc, cfg.UserTimeout)
	}
	if pw, ok := nc.(ProgressWriter); ok && cfg.WriteTimeout > 0 {
		pw.SetWriteProgress(cfg.WriteTimeout)
	}
	c := &Conn{
		nc:   nc,
		cfg:  cfg,
		mem:  mem,
		emit: emit,
		wake: make(chan struct{}, 1),
		quit: make(chan struct{}),
		done: make(chan struct{}),
		recv: make(map[uint64]*recvJob),
	}
	c.sums, _ = mem.(SumMemory)
	c.w = newWriter(c)
	c.r = &reader{c: c, rd: rd}
	c.live.Store(2)
	// Both goroutines end when c.quit is closed or their I/O fails (fail
	// closes nc, which unblocks the other one); the last one out emits
	// Closed and closes c.done.
	go c.run(c.w.run)
	go c.run(c.r.run)
	return c, nil
}

// run runs one of the two goroutines and, if it is the last to exit,
// emits Closed.
func (c *Conn) run(f func() error) {
	err := guardFaults(f)
	c.fail(err)
	if c.live.Add(-1) == 0 {
		c.emit(Closed{Err: c.err})
		close(c.done)
	}
}

// fail records the first error and stops both goroutines.
func (c *Conn) fail(err error) {
	c.failOnce.Do(func() {
		if err == nil {
			err = ErrClosed
		}
		c.err = err
		close(c.quit)
		c.nc.Close()
	})
}

// Close closes the connection now. It does not wait: Closed is emitted
// (with ErrClosed, unless an error came first) once both goroutines have
// exited, and Done is closed after that. Safe to call more than once.
func (c *Conn) Close() error {
	c.fail(ErrClosed)
	return nil
}

// Done is closed after the Closed event has been emitted (emit returned).
func (c *Conn) Done() <-chan struct{} { return c.done }

// ProbeAckDrops reports how many ProbeAcks were dropped because the peer
// had more than 64 probes unanswered.
func (c *Conn) ProbeAckDrops() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ackDrops
}

// Open announces producer job job with no blocks yet: until its last block
// is sent the writer sends a Progress frame every ProgressInterval in
// which the job wrote nothing. Progress.Queued is true while the job has
// blocks to send and none was sent yet (it waits for its turn in the send
// window: the consumer can tell a load queued behind others from one whose
// blocks are not ready); false while it waits for blocks, or once a chunk
// was written. Opening a job that is already open does nothing.
func (c *Conn) Open(job uint64) { c.push(command{kind: cmdOpen, job: job}) }

// Send queues blocks of producer job job (opening it if needed), to be
// streamed in the given order, interleaved chunk by chunk with other jobs.
// blocks is copied. last means no more blocks follow: after these, the
// writer writes Done and emits SendEnd{OK: true}. The source slots must stay
// unchanged until SendEnd (or Closed). Sending to a job after last is a bug
// that this side cannot detect once the job has ended. It panics if a
// slot's length is not BlockBytes.
func (c *Conn) Send(job uint64, blocks []Block, last bool) {
	for _, b := range blocks {
		if n := len(c.mem.Slot(b.Slot)); n != c.cfg.BlockBytes {
			panic(fmt.Sprintf("datapath: Send: slot %d has %d bytes, want %d", b.Slot, n, c.cfg.BlockBytes))
		}
	}
	c.push(command{kind: cmdSend, job: job, blocks: append([]Block(nil), blocks...), last: last})
}

// Cancel stops producer job job as soon as possible: at most the chunk being
// written completes, then the writer writes wire.Error{Code: ErrAborted} and
// emits SendEnd{OK: false}. If the job's Done is already built but not yet
// written, Cancel does nothing and SendEnd{OK: true} follows. For a job
// this side does not know (never opened, or already ended) it still writes
// the Error frame and emits SendEnd{OK: false}, so the consumer always sees a
// terminal frame; a peer ignores a terminal frame for a job it no longer
// expects, and the node should ignore a SendEnd for a job it no longer
// tracks.
func (c *Conn) Cancel(job uint64) { c.push(command{kind: cmdCancel, job: job}) }

// Probe sends wire.Probe{Seq: seq}; the peer answers and a ProbeAck{seq}
// event follows. seq must not be 0, which is the unanswered keepalive.
func (c *Conn) Probe(seq uint64) {
	if seq == 0 {
		panic("datapath: Probe: seq 0 is reserved for keepalives")
	}
	c.push(command{kind: cmdProbe, job: seq})
}

func (c *Conn) push(cmd command) {
	c.mu.Lock()
	if !c.writerOut {
		c.cmds = append(c.cmds, cmd)
	}
	c.mu.Unlock()
	c.poke()
}

// pushAck is called by the reader: never blocks, bounded.
func (c *Conn) pushAck(seq uint64) {
	c.mu.Lock()
	if !c.writerOut {
		if len(c.acks) >= maxAcks {
			n := copy(c.acks, c.acks[1:])
			c.acks = c.acks[:n]
			c.ackDrops++
		}
		c.acks = append(c.acks, seq)
	}
	c.mu.Unlock()
	c.poke()
}

func (c *Conn) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Expect registers consumer job job: block i of the job lands in slot
// slots[i]. Call it before the Fetch goes out on the control connection.
// The slots must stay reserved until RecvEnd for the job, or Closed. slots
// is copied. It panics if job is already expected or a slot's length is not
// BlockBytes.
func (c *Conn) Expect(job uint64, slots []uint32) {
	for _, s := range slots {
		if n := len(c.mem.Slot(s)); n != c.cfg.BlockBytes {
			panic(fmt.Sprintf("datapath: Expect: slot %d has %d bytes, want %d", s, n, c.cfg.BlockBytes))
		}
	}
	rj := &recvJob{
		slots: append([]uint32(nil), slots...),
		got:   make([]uint32, len(slots)),
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if _, dup := c.recv[job]; dup {
		panic(fmt.Sprintf("datapath: Expect: job %d already expected", job))
	}
	c.recv[job] = rj
}
