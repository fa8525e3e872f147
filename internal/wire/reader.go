package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// narrowMin is the payload from which ReadPayload reads past the buffer
// with readv (src.go), and the buffer's reads are capped at one chunk
// header until a frame other than a chunk comes. Smaller chunks are
// better batched by the buffer's full reads.
const narrowMin = 16 << 10

// Reader reads frames from a stream. It is not safe for concurrent use: one
// goroutine per connection reads.
//
// For the data-path types (*Chunk, *Progress, *Done, *Probe, *ProbeAck) Next
// returns a pointer to a struct owned by the Reader, valid only until the
// next call to Next: copy what you keep. Steady-state reading of these
// allocates nothing. Every other type is freshly allocated and the caller's.
//
// After a *Chunk, exactly one of ReadPayload or DiscardPayload must consume
// its payload before Next is called again (a zero-length payload needs
// neither).
//
// An error other than one wrapping ErrUsage is sticky: the stream is no
// longer known to be at a frame boundary (or the peer broke the protocol), so
// every later call returns the same error and the caller closes the
// connection.
type Reader struct {
	b   rbuf // sized by the traffic (rbuf.go)
	src *src // b's source: the connection, plus readv (src.go)
	lim Limits
	// narrowAt is the payload size from which ReadPayload uses readv
	// (narrowMin; fuzzing lowers it to reach that path).
	narrowAt int
	payload  uint32 // payload bytes of the last Chunk not yet consumed
	err      error  // sticky

	// Reading ahead (ReadPayloadAhead): payloads left to read without,
	// after a guess that missed, and the count of each outcome.
	aheadOff               int
	aheadHits, aheadMisses uint64

	// The structs Next hands out for the data-path types.
	chunk    Chunk
	progress Progress
	done     Done
	probe    Probe
	probeAck ProbeAck
}

// NewReader returns a Reader that reads frames from r and refuses anything
// over lim. Start from DefaultLimits(): a zero field refuses everything it
// bounds.
func NewReader(r io.Reader, lim Limits) *Reader {
	return newReaderSize(r, lim, defaultSizes)
}

// SetLimits replaces the Reader's limits for the frames that follow: a
// server reads a connection's first frame under tight limits (nobody is
// known yet) and the rest under the session's.
func (r *Reader) SetLimits(lim Limits) {
	r.lim = lim
}

// SetBudget makes the Reader charge the part of its buffer above the
// streaming size to bg (nil: none), from the next frame on: the memory
// that only large frames need is then shared across Readers and bounded.
// Call Release when done reading, to give the charge back.
func (r *Reader) SetBudget(bg *Budget) {
	r.b.charge(r.b.sz.idle, true) // what was charged to the old one
	r.b.budget = bg
	r.b.charge(len(r.b.buf), true)
}

// Release drops the Reader's buffer and gives back what it charged to its
// Budget; every later call fails. For the reading goroutine, once it is
// done with the connection.
func (r *Reader) Release() {
	if r.err == nil {
		r.err = fmt.Errorf("wire: reader released: %w", ErrUsage)
	}
	r.unahead()
	r.b.release()
}

// newReaderSize lets tests use tiny buffers, to exercise growing and
// shrinking without megabyte inputs.
func newReaderSize(r io.Reader, lim Limits, sz bufSizes) *Reader {
	return newReaderV(r, newVReader(r), lim, sz)
}

// newReaderV is newReaderSize with v as the connection's readv (nil:
// none); tests pass their own.
func newReaderV(r io.Reader, v vreader, lim Limits, sz bufSizes) *Reader {
	rd := &Reader{src: &src{r: r, v: v}, lim: lim, narrowAt: narrowMin}
	rd.b.init(rd.src, sz)
	return rd
}

// Next reads and decodes one frame. At a clean end of stream, between
// frames, it returns io.EOF itself; a stream cut inside a frame gives an
// error wrapping io.ErrUnexpectedEOF.
func (r *Reader) Next() (Message, error) {
	if r.err == nil && r.payload == 0 {
		// Wait for the next frame's header here, outside next's large
		// frame: an idle connection's reading goroutine spends its life
		// blocked in this read, and what its stack holds then decides
		// whether that stack fits its first 2 KiB.
		r.b.wait(frameHeader)
	}
	return r.next()
}

func (r *Reader) next() (Message, error) {
	if r.err != nil {
		return nil, r.err
	}
	if r.payload != 0 {
		return nil, fmt.Errorf("wire: Next: %d payload bytes of the last chunk unread: %w", r.payload, ErrUsage)
	}
	hdr, err := r.b.peek(frameHeader)
	if err != nil {
		if len(hdr) == 0 && err == io.EOF {
			return nil, r.fail(io.EOF)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// A read deadline that passed while the Reader waited for a
			// frame's header consumed nothing (peek): the Reader stays
			// usable, and the caller may set a new deadline and call Next
			// again (the data path does, when its own process could not
			// run at the deadline: issue 24, starvation blames nobody).
			return nil, streamErr("frame header", err)
		}
		return nil, r.fail(streamErr("frame header", err))
	}
	n := binary.BigEndian.Uint32(hdr)
	switch {
	case n < frameHeader-lenPrefix:
		return nil, r.fail(fmt.Errorf("wire: frame length %d: shorter than version and type: %w", n, ErrMalformed))
	case hdr[4] != Version:
		return nil, r.fail(fmt.Errorf("wire: frame version %d, want %d: %w", hdr[4], Version, ErrVersion))
	case uint64(n)+lenPrefix > uint64(r.lim.MaxFrame):
		// Refused before reading or allocating anything for the body.
		return nil, r.fail(tooLarge(Type(hdr[5]).String(), "frame length", uint64(n)+lenPrefix, r.lim.MaxFrame))
	}
	typ := Type(hdr[5])
	size := int(n) - (frameHeader - lenPrefix)
	r.b.discard(frameHeader) // cannot fail: the bytes are buffered
	if typ != TypeChunk {
		r.src.narrow = false // chunks are not streaming: full reads again
	}

	// Frames are decoded in place from the buffer, which grows to hold
	// the body (at most MaxFrame, checked above); decoders never alias
	// their input, so the buffer may shrink once the frame is decoded.
	b, err := r.b.peek(size)
	if err != nil {
		return nil, r.fail(streamErr(typ.String()+" body", err))
	}
	m := r.message(typ)
	if m == nil {
		return nil, r.fail(fmt.Errorf("wire: type %d: %w", uint8(typ), ErrUnknownType))
	}
	if err := m.decodeBody(b, r.lim); err != nil {
		return nil, r.fail(err)
	}
	r.b.discard(size) // cannot fail: the bytes are buffered
	r.b.frameDone(int(n)+lenPrefix, typ == TypeChunk)
	if typ == TypeChunk && r.chunk.Len > 0 {
		r.payload = r.chunk.Len
	} else {
		// The caller acts on this frame (a Done ends a job and frees
		// its slots) before reading on: nothing may stay in its memory.
		r.unahead()
	}
	return m, nil
}

// message returns the Reader's own struct for a data-path type, a new one
// for any other known type, nil for an unknown type.
func (r *Reader) message(t Type) body {
	switch t {
	case TypeChunk:
		return &r.chunk
	case TypeProgress:
		return &r.progress
	case TypeDone:
		return &r.done
	case TypeProbe:
		return &r.probe
	case TypeProbeAck:
		return &r.probeAck
	}
	return newBody(t)
}

// ReadPayload reads the payload of the Chunk that Next just returned into
// dst, which must be exactly Chunk.Len bytes long. Large payloads go from
// the connection straight into dst, past the Reader's buffer. It does not
// check the CRC: that is the caller's, with CRC32C.
func (r *Reader) ReadPayload(dst []byte) error { return r.ReadPayloadAhead(dst, nil) }

// ReadPayloadAhead is ReadPayload, and may also read what follows the
// payload into ahead, the caller's guesses of where the next chunks'
// payloads go, in order, in the same read, or in the read that waits for
// the next frame (src.go). The guesses must overlap neither dst nor each
// other, and must stay the caller's to write, and nobody else's to read
// or write, until Next has returned a frame other than a Chunk or the
// next call to ReadPayload, ReadPayloadAhead or DiscardPayload has
// returned (or the Reader failed): the Reader may have put the stream's
// bytes there. If the next chunk's payload goes to the first guess, its
// bytes are already in place, and so on down the guesses; in every other
// case the Reader takes back what waits before it returns anything, so no
// byte is lost or seen where it does not belong. Only the payload a frame
// says goes to a guess stays there: what a guess that missed holds is
// garbage. ahead is not kept: the caller may reuse the slice itself.
func (r *Reader) ReadPayloadAhead(dst []byte, ahead [][]byte) error {
	if r.err != nil {
		return r.err
	}
	if uint64(len(dst)) != uint64(r.payload) {
		return fmt.Errorf("wire: ReadPayload: len(dst) %d, payload %d bytes: %w", len(dst), r.payload, ErrUsage)
	}
	r.payload = 0
	if r.src.past != nil {
		r.src.armed = nil
	}
	if r.aheadOff > 0 {
		r.aheadOff--
		ahead = nil
	}
	if dst = r.takeAhead(dst); len(dst) == 0 {
		r.arm(ahead) // the payload came whole with the last read
		return nil
	}
	if len(dst) < r.narrowAt || r.src.v == nil {
		if _, err := io.ReadFull(&r.b, dst); err != nil {
			return r.fail(streamErr("chunk payload", err))
		}
		return nil
	}
	// What the buffer holds first (the whole payload, for a small one),
	// then the rest with readv, straight into dst (src.go). A read that
	// filled the buffer with this payload says nothing of what the buffer
	// needs: it does not make it grow.
	r.src.narrow = true
	r.b.full = false
	if c := r.b.buffered(); c > 0 {
		n, _ := r.b.read(dst[:min(c, len(dst))]) // from the buffer: cannot fail
		dst = dst[n:]
	}
	if len(dst) == 0 {
		return nil
	}
	if err := r.src.readPayload(dst, ahead); err != nil {
		return r.fail(streamErr("chunk payload", err))
	}
	r.arm(ahead)
	return nil
}

// arm keeps the guesses for the read that waits for the next frame's
// header (src.Read) when nothing is known past the payload just read:
// what follows is still in the socket.
func (r *Reader) arm(ahead [][]byte) {
	s := r.src
	if s.past != nil && s.narrow && len(ahead) > 0 && !s.waiting() && r.b.buffered() == 0 {
		s.armed = s.armBuf[:copy(s.armBuf[:], ahead)]
	}
}

// aheadBackoff is how many payloads ReadPayloadAhead reads without reading
// ahead after a guess missed: a peer whose chunks alternate between jobs
// would otherwise cost a copy of what was read ahead for every chunk.
const aheadBackoff = 16

// takeAhead settles what waits at the front of src.q, now that the payload
// dst of the chunk Next returned is known, and returns the part of dst
// still to read. The waiting bytes follow that chunk's header on the
// stream (nothing is buffered: the header came from q): the payload's
// first bytes, and then maybe more frames. In place when dst starts where
// they are: the guess was right. Else they are copied into dst, and what
// lies past dst goes to the buffer with everything else that waits.
func (r *Reader) takeAhead(dst []byte) []byte {
	s := r.src
	if !s.waiting() {
		return dst
	}
	g := &s.q[s.qh]
	if r.b.buffered() > 0 || len(dst) == 0 || !g.caller {
		r.unahead()
		return dst
	}
	p := g.b
	m := min(len(p), len(dst))
	if &dst[0] == &p[0] && m == len(p) {
		r.aheadHits++
	} else {
		r.miss()
		if &dst[0] != &p[0] {
			copy(dst[:m], p[:m]) // memmove: a guess that missed may overlap dst
		}
	}
	if g.b = p[m:]; len(g.b) == 0 {
		s.qh++
	} else {
		r.unahead()
	}
	return dst[m:]
}

// unahead moves everything that waits in src.q into the buffer, where the
// frames it holds are read from: the caller's memory is the caller's again.
func (r *Reader) unahead() {
	s := r.src
	if s.past == nil {
		return
	}
	s.armed = nil
	if !s.waiting() {
		return
	}
	for _, g := range s.q[s.qh:s.qn] {
		if g.caller {
			r.miss()
			break
		}
	}
	for i := s.qh; i < s.qn; i++ {
		r.b.push(s.q[i].b)
		s.q[i] = seg{}
	}
	s.qh, s.qn = 0, 0
}

func (r *Reader) miss() {
	r.aheadMisses++
	r.aheadOff = aheadBackoff
}

// AheadStats reports how many reads ahead (ReadPayloadAhead) landed where
// the next payload went, and how many were taken back.
func (r *Reader) AheadStats() (hits, misses uint64) { return r.aheadHits, r.aheadMisses }

// DiscardPayload skips the payload of the Chunk that Next just returned, for
// a job the caller no longer wants.
func (r *Reader) DiscardPayload() error {
	if r.err != nil {
		return r.err
	}
	n := int(r.payload)
	r.payload = 0
	r.unahead()
	r.src.narrow = false // a payload through the buffer: full reads
	if err := r.b.discard(n); err != nil {
		return r.fail(streamErr("chunk payload", err))
	}
	return nil
}

func (r *Reader) fail(err error) error {
	r.err = err
	return err
}

// streamErr wraps an I/O error met inside a frame. io.EOF there means the
// stream was cut, so it becomes io.ErrUnexpectedEOF.
func streamErr(what string, err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("wire: reading %s: %w", what, err)
}
