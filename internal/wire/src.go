package wire

import (
	"errors"
	"io"
)

// Payloads straight into their slots. The Reader's buffer (rbuf.go) fills
// as much of itself as the socket holds, so the read that brings a chunk's
// header would also bring up to 64 KiB of its payload, which ReadPayload
// would then copy into the slot: a memmove per chunk on top of the
// kernel's copy, a tenth of the consumer's CPU in a profile of one load. On a socket that can read
// into two buffers at once (readv), ReadPayload reads the rest of a large
// payload into the slot and, in the same call, up to one chunk header of
// what follows into src.spill; and while chunks stream (narrow), the
// buffer's own reads are capped at one chunk header. So a chunk's payload
// never passes through the buffer, and its header costs no read of its
// own (and a load of large chunks needs no more than the idle buffer).
//
// Read-ahead (ReadPayloadAhead): the same readv may also read past that
// header, into the caller's guess of where the next chunk's payload goes
// (the next piece of the same job, in its own slot). Those bytes, pend,
// are the stream's next after spill. When the next chunk's payload is
// indeed that region they are already in place, and a load of many chunks
// reads across chunk boundaries as a plain stream would, one readv per
// socket-full instead of one per chunk (the chunk-bounded reads cost a
// tenth of a fan-in's CPU here). When the guess is wrong the Reader takes
// them back into its buffer before anything else happens (reader.go). A
// guess whose payload's read got nothing past it stays armed: the read
// that waits for the next header reads into it too.
//
// src sits between the buffer and the connection; every field is the reading
// goroutine's.
type src struct {
	r      io.Reader
	v      vreader // nil: the connection cannot readv (not TCP, or not Linux)
	narrow bool    // cap the buffer's reads at ChunkHeaderLen
	spill  [ChunkHeaderLen]byte
	s0, s1 int    // spill[s0:s1] was read past a payload and not yet taken by the buffer
	pend   []byte // read ahead past spill into the caller's memory, not yet taken
	armed  []byte // the last guess, when its payload's read got nothing past it
}

// vreader reads into a, then b, then c (which may be empty) in one call
// (readv): it returns the bytes read in all, at least 1, or an error;
// io.EOF at the stream's end.
type vreader interface {
	readv(a, b, c []byte) (int, error)
}

// errBadCount: the source or the vreader broke its contract.
var errBadCount = errors.New("wire: a read returned an impossible count")

// maxEmptyReads bounds reads that return nothing and no error, as bufio.
const maxEmptyReads = 100

// Read is the buffer's source: the bytes read past the last payload first
// (spill, then pend), then the connection, capped at one chunk header while
// chunks stream.
func (s *src) Read(p []byte) (int, error) {
	if s.s0 < s.s1 {
		n := copy(p, s.spill[s.s0:s.s1])
		s.s0 += n
		return n, nil
	}
	if len(s.pend) > 0 {
		n := copy(p, s.pend)
		s.pend = s.pend[n:]
		return n, nil
	}
	if s.narrow && len(p) > ChunkHeaderLen {
		p = p[:ChunkHeaderLen]
	}
	if a := s.armed; len(a) > 0 && len(p) == ChunkHeaderLen {
		// The reader caught up with the writer: the header it waits for
		// comes with the start of that chunk's payload, which goes where
		// the last payload's read guessed, in this same read.
		s.armed = nil
		n, err := s.v.readv(p, a, nil)
		switch {
		case err != nil || n <= len(p):
			return n, err
		case n > len(p)+len(a):
			return 0, errBadCount
		}
		s.pend = a[:n-len(p)]
		return len(p), nil
	}
	return s.r.Read(p)
}

// readPayload fills p from the connection (the buffer holds nothing: its
// caller drained it), keeping any bytes read past p
// in spill for the buffer and, past a full spill, in ahead (pend).
func (s *src) readPayload(p, ahead []byte) error {
	for len(p) > 0 && (s.s0 < s.s1 || len(s.pend) > 0) {
		// Not reached (the buffer takes spill before any frame, and the
		// Reader pend), but cheap to be right.
		n, _ := s.Read(p)
		p = p[n:]
	}
	empty := 0
	for len(p) > 0 {
		n, err := s.v.readv(p, s.spill[:], ahead)
		switch {
		case err != nil:
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		case n < 0 || n > len(p)+len(s.spill)+len(ahead):
			return errBadCount
		case n == 0:
			if empty++; empty >= maxEmptyReads {
				return io.ErrNoProgress
			}
		case n > len(p)+len(s.spill):
			s.s0, s.s1 = 0, len(s.spill)
			s.pend = ahead[:n-len(p)-len(s.spill)]
			return nil
		case n > len(p):
			s.s0, s.s1 = 0, n-len(p)
			return nil
		}
		p = p[n:]
	}
	return nil
}
