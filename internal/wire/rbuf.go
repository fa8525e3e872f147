package wire

import "io"

// The Reader's buffer, sized by what the connection does. An idle
// session's connections each see a frame every heartbeat interval (a Ping,
// a keepalive Probe) of a few dozen bytes, while a Reader may be open for
// days; so an idle Reader reads into idle, an array inside it, and holds
// no buffer of its own. It takes a buffer from the heap when it needs
// one:
//
//   - a frame larger than the buffer: it grows to hold the whole frame
//     (the frame's length is checked against MaxFrame first, so that is
//     the most a peer can make it allocate);
//   - a read that filled the buffer (the peer is ahead: a burst of small
//     chunks or frames): it doubles, from firstSize up to readBufSize, so
//     that one read brings many frames.
//
// It gives the buffer back after quietReads reads in a row that each
// brought less than idle holds, with no chunk and no frame larger than
// idle among their frames (what is left buffered then moves to idle).
// Counting reads, not time: the reading goroutine wakes only when bytes
// come, so a read is the only moment it can act, and an idle session's
// connection gets one small read per heartbeat interval (a Ping, its
// Pong, a keepalive, often two of them in one read), which turns the
// count into a delay of quietReads heartbeats with no clock to pass in.
// A peer that streams fills its reads, and a chunk starts the count over,
// so a load never gives its buffer back between chunks: growth stops at
// readBufSize and a chunk allocates nothing.
const (
	idleSize    = 256      // the inline buffer: heartbeats, probes, small lookups
	firstSize   = 4 << 10  // the first heap buffer
	quietReads  = 4        // small reads in a row before the heap buffer goes
	readBufSize = 64 << 10 // growth for streaming stops here
)

// bufSizes are rbuf's sizes; tests shrink them to reach every path with
// small inputs.
type bufSizes struct {
	idle, first, stream int // idle <= idleSize
}

var defaultSizes = bufSizes{idle: idleSize, first: firstSize, stream: readBufSize}

// rbuf is a read buffer over src, with the bufio.Reader operations the
// Reader needs (Peek, Discard, Read, Buffered) and the sizing above. Its
// fields are the reading goroutine's.
type rbuf struct {
	src   io.Reader
	sz    bufSizes
	buf   []byte // idle[:sz.idle] or a heap buffer
	r, w  int    // buf[r:w] is buffered
	err   error  // the source's, returned once the buffered bytes are used
	full  bool   // the last read filled buf: grow before the next
	quiet int    // small reads in a row (see quietReads)
	// budget, when set, is charged for the bytes of buf above sz.stream
	// (charged: how many now); see Budget.
	budget  *Budget
	charged int
	idle    [idleSize]byte
}

func (b *rbuf) init(src io.Reader, sz bufSizes) {
	b.src, b.sz = src, sz
	b.buf = b.idle[:sz.idle]
}

func (b *rbuf) buffered() int { return b.w - b.r }

// heap reports whether b holds a heap buffer.
func (b *rbuf) heap() bool { return &b.buf[0] != &b.idle[0] }

// resize moves the buffered bytes to a buffer of n bytes (idle's when n
// is sz.idle). n is at least what is buffered. The budget is charged
// whatever it has left: the callers that may refuse use grow.
func (b *rbuf) resize(n int) {
	b.charge(n, true)
	b.move(n)
}

// grow is resize for a frame's growth past sz.stream, which the budget
// may refuse.
func (b *rbuf) grow(n int) error {
	if !b.charge(n, false) {
		return budgetErr(n, b.budget)
	}
	b.move(n)
	return nil
}

// charge sets the budget's charge for a buffer of n bytes: what lies above
// sz.stream. Unless force, a charge the budget cannot hold is refused
// (false) and nothing changes.
func (b *rbuf) charge(n int, force bool) bool {
	if b.budget == nil {
		return true
	}
	want := 0
	if n > b.sz.idle {
		want = max(0, n-b.sz.stream)
	}
	switch d := want - b.charged; {
	case d > 0:
		if !b.budget.take(int64(d), force) {
			return false
		}
	case d < 0:
		b.budget.give(int64(-d))
	}
	b.charged = want
	return true
}

// release drops the buffer and its charge; the rbuf reads no more.
func (b *rbuf) release() {
	b.charge(b.sz.idle, true)
	b.buf = b.idle[:b.sz.idle]
	b.r, b.w = 0, 0
}

func (b *rbuf) move(n int) {
	nb := b.idle[:b.sz.idle]
	if n > b.sz.idle {
		nb = make([]byte, n)
	}
	b.w = copy(nb, b.buf[b.r:b.w])
	b.r = 0
	b.buf = nb
}

// fill reads once into the free end of buf (a few times if the source
// returns nothing and no error), after making room: the buffered bytes
// slide to the front, and a buffer the last read filled doubles.
func (b *rbuf) fill() {
	if b.full && len(b.buf) < b.sz.stream {
		b.resize(min(max(2*len(b.buf), b.sz.first), b.sz.stream))
	} else if b.r > 0 {
		b.w = copy(b.buf, b.buf[b.r:b.w])
		b.r = 0
	}
	b.full = false
	for range maxEmptyReads {
		n, err := b.src.Read(b.buf[b.w:])
		if n < 0 || n > len(b.buf)-b.w {
			b.err = errBadCount
			return
		}
		b.w += n
		if n > 0 {
			b.full = b.w == len(b.buf)
			if n < b.sz.idle {
				b.quiet++
			} else {
				b.quiet = 0
			}
		}
		if err != nil {
			b.err = err
			return
		}
		if n > 0 {
			return
		}
	}
	b.err = io.ErrNoProgress
}

func (b *rbuf) readErr() error {
	err := b.err
	b.err = nil
	return err
}

// peek returns the next n bytes without consuming them, growing buf to
// hold them; with fewer available it returns those and the error. The
// caller bounds n. Up to sz.stream buf grows at once; past it, as the
// bytes arrive (doubling when full), so that a header announcing a large
// frame costs nothing until its body comes, and that growth is charged
// to the budget, which may refuse it (an error wrapping ErrBudget).
func (b *rbuf) peek(n int) ([]byte, error) {
	if n > len(b.buf) && len(b.buf) < b.sz.stream {
		b.resize(max(min(n, b.sz.stream), min(2*len(b.buf), b.sz.stream), b.sz.first))
	}
	for b.buffered() < n && b.err == nil {
		if b.buffered() == len(b.buf) {
			if err := b.grow(min(n, 2*len(b.buf))); err != nil {
				return b.buf[b.r:b.w], err
			}
		}
		b.fill() // it slides the buffered bytes to the front: room for n
	}
	if b.buffered() < n {
		return b.buf[b.r:b.w], b.readErr()
	}
	return b.buf[b.r : b.r+n], nil
}

// wait reads until n bytes are buffered or the source fails (peek then
// returns them, or the error), without the growth peek does: n is at most
// a frame header.
func (b *rbuf) wait(n int) {
	for b.buffered() < n && b.err == nil {
		b.fill()
	}
}

// discard skips n bytes, reading past what is buffered if need be.
func (b *rbuf) discard(n int) error {
	for {
		k := min(n, b.buffered())
		b.r += k
		if n -= k; n == 0 {
			return nil
		}
		if b.err != nil {
			return b.readErr()
		}
		b.fill()
	}
}

// read is bufio.Reader.Read: the buffered bytes, else one read, straight
// into p when p is at least as large as buf.
func (b *rbuf) read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if b.r == b.w {
		if b.err != nil {
			return 0, b.readErr()
		}
		if len(p) >= len(b.buf) {
			n, err := b.src.Read(p)
			if n < 0 || n > len(p) {
				return 0, errBadCount
			}
			return n, err
		}
		b.fill()
		if b.r == b.w {
			return 0, b.readErr()
		}
	}
	n := copy(p, b.buf[b.r:b.w])
	b.r += n
	return n, nil
}

// push appends p to the buffered bytes, growing buf to hold them: what
// was read ahead into a caller's memory and is the stream's next
// (reader.go's unahead), at most a chunk payload and a header.
func (b *rbuf) push(p []byte) {
	if need := b.buffered() + len(p); need > len(b.buf) {
		b.resize(need)
	} else if len(b.buf)-b.w < len(p) {
		b.w = copy(b.buf, b.buf[b.r:b.w])
		b.r = 0
	}
	b.w += copy(b.buf[b.w:], p)
}

// Read makes rbuf an io.Reader, for io.ReadFull.
func (b *rbuf) Read(p []byte) (int, error) { return b.read(p) }

// frameDone is told of each frame of n bytes once it is consumed: a chunk
// or a frame larger than idle starts the count of small reads over; after
// quietReads of them, the heap buffer goes if what is left fits in idle.
//
// A budgeted buffer grown past sz.stream for a large frame is given back
// at once (decoders never alias the buffer): memory held for large frames
// is memory held by frames not yet decoded.
func (b *rbuf) frameDone(n int, chunk bool) {
	if b.budget != nil && len(b.buf) > b.sz.stream {
		b.resize(max(b.sz.stream, b.buffered()))
	}
	if chunk || n > b.sz.idle {
		b.quiet = 0
		return
	}
	if b.quiet >= quietReads && b.heap() && b.buffered() <= b.sz.idle {
		b.resize(b.sz.idle)
		b.full = false
		b.quiet = 0
	}
}
