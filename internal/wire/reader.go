package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// readBufSize is the bufio size: frames up to this size are decoded in place
// from the bufio buffer, larger ones are read into Reader.buf.
const readBufSize = 64 << 10

// narrowMin is the payload from which ReadPayload reads past bufio with
// readv (src.go), and bufio's reads are capped at one chunk header until a
// frame other than a chunk comes. Smaller chunks are better batched by
// bufio's full reads.
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
	br  *bufio.Reader
	src *src // br's source: the connection, plus readv (src.go)
	lim Limits
	// narrowAt is the payload size from which ReadPayload uses readv
	// (narrowMin; fuzzing lowers it to reach that path).
	narrowAt int
	buf      []byte // body of frames larger than br's buffer; cap <= lim.MaxFrame; dropped when quiet
	payload  uint32 // payload bytes of the last Chunk not yet consumed
	err      error  // sticky

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
	return newReaderSize(r, lim, readBufSize)
}

// SetLimits replaces the Reader's limits for the frames that follow: a
// server reads a connection's first frame under tight limits (nobody is
// known yet) and the rest under the session's.
func (r *Reader) SetLimits(lim Limits) {
	r.lim = lim
	if uint32(cap(r.buf)) > lim.MaxFrame {
		r.buf = nil
	}
}

// newReaderSize lets tests use a tiny bufio buffer, to exercise the path for
// frames larger than it without megabyte inputs.
func newReaderSize(r io.Reader, lim Limits, size int) *Reader {
	return newReaderV(r, newVReader(r), lim, size)
}

// newReaderV is newReaderSize with v as the connection's readv (nil:
// none); tests pass their own.
func newReaderV(r io.Reader, v vreader, lim Limits, size int) *Reader {
	s := &src{r: r, v: v}
	return &Reader{br: bufio.NewReaderSize(s, size), src: s, lim: lim, narrowAt: narrowMin}
}

// Next reads and decodes one frame. At a clean end of stream, between
// frames, it returns io.EOF itself; a stream cut inside a frame gives an
// error wrapping io.ErrUnexpectedEOF.
func (r *Reader) Next() (Message, error) {
	if r.err != nil {
		return nil, r.err
	}
	if r.payload != 0 {
		return nil, fmt.Errorf("wire: Next: %d payload bytes of the last chunk unread: %w", r.payload, ErrUsage)
	}
	hdr, err := r.br.Peek(frameHeader)
	if err != nil {
		if len(hdr) == 0 && err == io.EOF {
			return nil, r.fail(io.EOF)
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
	r.br.Discard(frameHeader) // cannot fail: the bytes are buffered
	if typ != TypeChunk {
		r.src.narrow = false // chunks are not streaming: full reads again
	}

	// Small frames are decoded in place from bufio's buffer (decoders never
	// alias their input); large ones are read into r.buf.
	var b []byte
	inPlace := size <= r.br.Size()
	if inPlace {
		b, err = r.br.Peek(size)
	} else {
		b = r.grow(size)
		_, err = io.ReadFull(r.br, b)
	}
	if err != nil {
		return nil, r.fail(streamErr(typ.String()+" body", err))
	}
	m := r.message(typ)
	if m == nil {
		return nil, r.fail(fmt.Errorf("wire: type %d: %w", uint8(typ), ErrUnknownType))
	}
	err = m.decodeBody(b, r.lim)
	if inPlace {
		r.br.Discard(size)
		if r.buf != nil && r.br.Buffered() == 0 {
			// A small frame and nothing more in hand: the burst of large
			// frames r.buf grew for is over. An idle connection does not
			// keep up to MaxFrame for a frame it read once (decoders
			// never alias their input, so nothing points into it).
			r.buf = nil
		}
	}
	if err != nil {
		return nil, r.fail(err)
	}
	if typ == TypeChunk {
		r.payload = r.chunk.Len
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

// grow returns r.buf resized to n bytes. It at least doubles the capacity
// to amortise, but never past MaxFrame, which bounds n.
func (r *Reader) grow(n int) []byte {
	if n > cap(r.buf) {
		c := min(max(n, 2*cap(r.buf)), int(r.lim.MaxFrame))
		r.buf = make([]byte, c)
	}
	return r.buf[:n]
}

// ReadPayload reads the payload of the Chunk that Next just returned into
// dst, which must be exactly Chunk.Len bytes long. Large payloads go from
// the connection straight into dst, past the bufio buffer. It does not
// check the CRC: that is the caller's, with CRC32C.
func (r *Reader) ReadPayload(dst []byte) error {
	if r.err != nil {
		return r.err
	}
	if uint64(len(dst)) != uint64(r.payload) {
		return fmt.Errorf("wire: ReadPayload: len(dst) %d, payload %d bytes: %w", len(dst), r.payload, ErrUsage)
	}
	r.payload = 0
	if len(dst) < r.narrowAt || r.src.v == nil {
		if _, err := io.ReadFull(r.br, dst); err != nil {
			return r.fail(streamErr("chunk payload", err))
		}
		return nil
	}
	// What bufio holds first (the whole payload, for a small one), then
	// the rest with readv, straight into dst (src.go).
	r.src.narrow = true
	if c := r.br.Buffered(); c > 0 {
		n, _ := r.br.Read(dst[:min(c, len(dst))]) // from the buffer: cannot fail
		dst = dst[n:]
	}
	if len(dst) == 0 {
		return nil
	}
	if err := r.src.readPayload(dst); err != nil {
		return r.fail(streamErr("chunk payload", err))
	}
	return nil
}

// DiscardPayload skips the payload of the Chunk that Next just returned, for
// a job the caller no longer wants.
func (r *Reader) DiscardPayload() error {
	if r.err != nil {
		return r.err
	}
	n := int(r.payload)
	r.payload = 0
	r.src.narrow = false // a payload through bufio: full reads
	if _, err := r.br.Discard(n); err != nil {
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
