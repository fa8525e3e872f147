package wire

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/kvp2p/kvp2p/internal/crc32c"
)

// Sentinel errors. Every error from this package wraps exactly one of them,
// except stream errors from Reader, which wrap the underlying I/O error
// (io.ErrUnexpectedEOF for a stream cut inside a frame) and io.EOF, which is
// returned bare at a clean frame boundary.
//
// ErrVersion, ErrTooLarge, ErrMalformed and ErrUnknownType mean the peer sent
// something this side cannot accept (a protocol error, or an incompatible
// peer for ErrVersion). ErrUsage means the caller broke Reader's contract; it
// is never the peer's fault and must not count against it.
var (
	ErrVersion     = errors.New("unsupported protocol version")
	ErrTooLarge    = errors.New("over limit")
	ErrMalformed   = errors.New("malformed")
	ErrUnknownType = errors.New("unknown message type")
	ErrUsage       = errors.New("reader misuse")
)

const (
	lenPrefix   = 4             // uint32 length of what follows
	frameHeader = lenPrefix + 2 // length, version, type
	chunkBody   = 8 + 4 + 4 + 4 + 4

	// ChunkHeaderLen is the size of the frame AppendChunkHeader appends; the
	// payload follows it on the stream.
	ChunkHeaderLen = frameHeader + chunkBody
)

// CRC32C returns the CRC-32C (Castagnoli) checksum of p, the checksum
// Chunk.CRC carries (internal/crc32c: AVX-512 where the CPU has it).
func CRC32C(p []byte) uint32 { return crc32c.Checksum(p) }

// body is implemented by every message type (bodies.go). Both methods take
// and return plain values so that calls through the interface do not make
// anything escape: Append and Reader.Next stay allocation-free.
type body interface {
	Message
	// appendBody appends the body, refusing values over lim.
	appendBody(b []byte, lim Limits) ([]byte, error)
	// decodeBody overwrites every field from b, which must hold exactly one body.
	decodeBody(b []byte, lim Limits) error
}

// newBody returns a zero message of type t, or nil if t is unknown.
func newBody(t Type) body {
	switch t {
	case TypeHello:
		return new(Hello)
	case TypeHelloAck:
		return new(HelloAck)
	case TypePing:
		return new(Ping)
	case TypePong:
		return new(Pong)
	case TypeLookup:
		return new(Lookup)
	case TypeLookupResp:
		return new(LookupResp)
	case TypeFetch:
		return new(Fetch)
	case TypeTransferDone:
		return new(TransferDone)
	case TypeAbort:
		return new(Abort)
	case TypeAbortAck:
		return new(AbortAck)
	case TypeGoodbye:
		return new(Goodbye)
	case TypeDataAttach:
		return new(DataAttach)
	case TypeChunk:
		return new(Chunk)
	case TypeProgress:
		return new(Progress)
	case TypeDone:
		return new(Done)
	case TypeError:
		return new(Error)
	case TypeProbe:
		return new(Probe)
	case TypeProbeAck:
		return new(ProbeAck)
	case TypeSummary:
		return new(Summary)
	case TypeLookupPending:
		return new(LookupPending)
	}
	return nil
}

// Append appends one whole frame holding m (length prefix included) to dst
// and returns the extended slice. For a *Chunk it appends only the header
// frame: the caller writes the Len payload bytes after it.
//
// Values that a decoder with DefaultLimits would refuse are refused here
// (wrapping ErrTooLarge or ErrMalformed) and dst is returned unchanged, so a
// frame Append produces always decodes. A peer that advertised a smaller
// Hello.MaxFrame is the caller's to honour: compare the frame's length.
// m must not be a nil pointer.
func Append(dst []byte, m Message) ([]byte, error) {
	b, ok := m.(body)
	if !ok {
		return dst, fmt.Errorf("wire: Append %T: %w", m, ErrUnknownType)
	}
	lim := DefaultLimits()
	start := len(dst)
	out := append(dst, 0, 0, 0, 0, Version, byte(b.Type()))
	out, err := b.appendBody(out, lim)
	if err != nil {
		return dst, err
	}
	n := len(out) - start - lenPrefix
	if uint64(n)+lenPrefix > uint64(lim.MaxFrame) {
		return dst, tooLarge(b.Type().String(), "frame length", uint64(n)+lenPrefix, lim.MaxFrame)
	}
	binary.BigEndian.PutUint32(out[start:], uint32(n))
	return out, nil
}

// AppendChunkHeader appends the ChunkHeaderLen-byte header frame of c to dst.
// It does not allocate when dst has the capacity, so the data path can build
// net.Buffers{header, payload} with the payload straight from the arena.
//
// It panics if c.Len is over DefaultLimits().MaxChunk or the chunk ends past
// DefaultLimits().MaxBlockSize: the chunk size is the sender's own setting,
// and a frame that default-limits peers refuse would be blamed on the session.
func AppendChunkHeader(dst []byte, c *Chunk) []byte {
	if err := c.check(DefaultLimits()); err != nil {
		panic(err)
	}
	return appendChunk(append(dst, 0, 0, 0, 2+chunkBody, Version, byte(TypeChunk)), c)
}

// Decode decodes one frame body of type typ: the bytes after the version and
// type bytes. Every length is checked against lim and against what is left
// of body before anything is allocated, and trailing bytes are an error.
// The result never aliases body.
func Decode(typ Type, body []byte, lim Limits) (Message, error) {
	if uint64(len(body))+frameHeader > uint64(lim.MaxFrame) {
		return nil, tooLarge(typ.String(), "frame length", uint64(len(body))+frameHeader, lim.MaxFrame)
	}
	m := newBody(typ)
	if m == nil {
		return nil, fmt.Errorf("wire: type %d: %w", uint8(typ), ErrUnknownType)
	}
	if err := m.decodeBody(body, lim); err != nil {
		return nil, err
	}
	return m, nil
}

// The error constructors take plain values so that the fmt boxing happens
// only on the error path: the decoders' success path must not allocate.

func tooLarge(field, what string, got uint64, limit uint32) error {
	return fmt.Errorf("wire: %s: %s %d over limit %d: %w", field, what, got, limit, ErrTooLarge)
}

func malformed(field, what string) error {
	return fmt.Errorf("wire: %s: %s: %w", field, what, ErrMalformed)
}

// encoder appends fields to b, keeping the first error. Scalars cannot fail;
// lengths are checked against lim.
type encoder struct {
	b   []byte
	lim Limits
	msg string // message name, for errors
	err error
}

func (e *encoder) u8(v uint8)     { e.b = append(e.b, v) }
func (e *encoder) u32(v uint32)   { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *encoder) u64(v uint64)   { e.b = binary.BigEndian.AppendUint64(e.b, v) }
func (e *encoder) boolean(v bool) { e.u8(b2u(v)) }

func b2u(v bool) uint8 {
	if v {
		return 1
	}
	return 0
}

// length appends a uvarint count after checking it against limit.
func (e *encoder) length(field string, n int, limit uint32) bool {
	if e.err != nil {
		return false
	}
	if uint64(n) > uint64(limit) {
		e.err = tooLarge(at(e.msg, field), "length", uint64(n), limit)
		return false
	}
	e.b = binary.AppendUvarint(e.b, uint64(n))
	return true
}

func (e *encoder) str(field, s string) {
	if e.length(field, len(s), e.lim.MaxString) {
		e.b = append(e.b, s...)
	}
}

func (e *encoder) keys(field string, ks []Key) {
	if e.length(field, len(ks), e.lim.MaxKeys) {
		for i := range ks {
			e.b = append(e.b, ks[i][:]...)
		}
	}
}

// bits packs vs LSB-first: bit i is bit i%8 of byte i/8; unused bits are zero.
func (e *encoder) bits(field string, vs []bool) {
	if !e.length(field, len(vs), e.lim.MaxKeys) {
		return
	}
	for i := 0; i < len(vs); i += 8 {
		var x uint8
		for j := 0; j < 8 && i+j < len(vs); j++ {
			x |= b2u(vs[i+j]) << j
		}
		e.b = append(e.b, x)
	}
}

func (e *encoder) slots(field string, vs []uint32) {
	if e.length(field, len(vs), e.lim.MaxKeys) {
		for _, v := range vs {
			e.u32(v)
		}
	}
}

// decoder consumes fields from the front of b, keeping the first error;
// after an error every read returns a zero value.
type decoder struct {
	b   []byte
	lim Limits
	msg string // message name, for errors
	err error
}

// at names a field in an error; only error paths call it, so the
// concatenation never costs the success path an allocation.
func at(msg, field string) string { return msg + "." + field }

// take consumes n bytes, or fails without consuming anything when fewer are
// left. Every allocation sized by the wire goes through take first, so a
// count can never ask for more memory than the body it came in.
func (d *decoder) take(field string, n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = fmt.Errorf("wire: %s: truncated: need %d bytes, %d left: %w", at(d.msg, field), n, len(d.b), ErrMalformed)
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) u8(field string) uint8 {
	if p := d.take(field, 1); d.err == nil {
		return p[0]
	}
	return 0
}

func (d *decoder) u32(field string) uint32 {
	if p := d.take(field, 4); d.err == nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

func (d *decoder) u64(field string) uint64 {
	if p := d.take(field, 8); d.err == nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

// boolean accepts only 0 and 1, so that every body has one encoding.
func (d *decoder) boolean(field string) bool {
	v := d.u8(field)
	if v > 1 && d.err == nil {
		d.err = malformed(at(d.msg, field), "bool is not 0 or 1")
	}
	return v == 1
}

// length reads a uvarint count and checks it against limit. Non-minimal
// uvarints are refused, again so that every body has one encoding.
func (d *decoder) length(field string, limit uint32) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	switch {
	case n == 0:
		d.err = malformed(at(d.msg, field), "truncated length")
	case n < 0:
		d.err = malformed(at(d.msg, field), "length overflows 64 bits")
	case n > 1 && d.b[n-1] == 0:
		d.err = malformed(at(d.msg, field), "non-minimal length")
	case v > uint64(limit):
		d.err = tooLarge(at(d.msg, field), "length", v, limit)
	}
	if d.err != nil {
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) str(field string) string {
	n := d.length(field, d.lim.MaxString)
	return string(d.take(field, n))
}

// keys, bits and slots return nil for an empty list.
func (d *decoder) keys(field string) []Key {
	n := d.length(field, d.lim.MaxKeys)
	p := d.take(field, n*KeySize)
	if d.err != nil || n == 0 {
		return nil
	}
	ks := make([]Key, n)
	for i := range ks {
		copy(ks[i][:], p[i*KeySize:])
	}
	return ks
}

func (d *decoder) bits(field string) []bool {
	n := d.length(field, d.lim.MaxKeys)
	p := d.take(field, (n+7)/8)
	if d.err != nil || n == 0 {
		return nil
	}
	if pad := n % 8; pad != 0 && p[len(p)-1]>>pad != 0 {
		d.err = malformed(at(d.msg, field), "padding bits set")
		return nil
	}
	vs := make([]bool, n)
	for i := range vs {
		vs[i] = p[i/8]>>(i%8)&1 == 1
	}
	return vs
}

func (d *decoder) slots(field string) []uint32 {
	n := d.length(field, d.lim.MaxKeys)
	p := d.take(field, n*4)
	if d.err != nil || n == 0 {
		return nil
	}
	vs := make([]uint32, n)
	for i := range vs {
		vs[i] = binary.BigEndian.Uint32(p[i*4:])
	}
	return vs
}

// finish reports the first error, or trailing bytes after a complete body.
func (d *decoder) finish() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("wire: %s: %d trailing bytes: %w", d.msg, len(d.b), ErrMalformed)
	}
	return d.err
}
