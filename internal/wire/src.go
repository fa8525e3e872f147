package wire

import (
	"errors"
	"io"
)

// Payloads straight into their slots. The Reader's buffer (rbuf.go) fills
// as much of itself as the socket holds, so the read that brings a chunk's
// header would also bring up to 64 KiB of its payload, which ReadPayload
// would then copy into the slot: a memmove per chunk on top of the
// kernel's copy, a tenth of the consumer's CPU in a profile of one load.
// On a socket that can read into several buffers at once (readv),
// ReadPayload reads the rest of a large payload into the slot and, in the
// same call, up to one chunk header of what follows into past.hdrs; and
// while chunks stream (narrow), the buffer's own reads are capped at one
// chunk header. So a chunk's payload
// never passes through the buffer, and its header costs no read of its
// own (and a load of large chunks needs no more than the idle buffer).
//
// Read-ahead (ReadPayloadAhead): the same readv may also read past that
// header, into the caller's guesses of where the next chunks' payloads go
// (the next pieces of the same job, in their own slots), with room for a
// chunk header between two guesses. What it brings past the payload waits
// in q, in stream order: headers in hdrs, payload bytes where they were
// guessed to go. When the next chunks' payloads are indeed those regions
// their bytes are already in place, and a load of many chunks is read as a
// plain stream would be, up to aheadBytes per readv instead of one readv
// per chunk (reads that stop at each chunk cost 10-15% of a fan-in's CPU
// here, in the kernel: see BenchmarkFanInVsRaw). When a guess is wrong the
// Reader takes every byte still waiting back into its buffer before it
// returns anything (reader.go). Guesses whose payload's read got nothing
// past it stay armed: the read that waits for the next header reads into
// them too.
//
// src sits between the buffer and the connection; every field is the reading
// goroutine's.
type src struct {
	r      io.Reader
	v      vreader // nil: the connection cannot readv (not TCP, or not Linux)
	narrow bool    // cap the buffer's reads at ChunkHeaderLen
	*past          // nil until the first payload read with readv
}

// past is what src needs to read past payloads: a control connection,
// or an idle session's data connection, never allocates it.
type past struct {
	hdrs   [MaxAhead][ChunkHeaderLen]byte // room for the header before each guess
	q      [2 * MaxAhead]seg              // read past the payload, not yet taken, in stream order
	qh, qn int                            // q[qh:qn] is waiting
	armed  [][]byte                       // guesses kept for the next header's read (armBuf)
	armBuf [MaxAhead][]byte
	iov    [1 + 2*MaxAhead][]byte // one read's buffers
	mine   [1 + 2*MaxAhead]bool   // iov[i] is in hdrs, not the caller's memory
}

// MaxAhead bounds the guesses one read fills (ReadPayloadAhead uses the
// first MaxAhead it is given).
const MaxAhead = 4

// seg is bytes read past a payload: in hdrs (a header, or what came in
// its place), or in the caller's memory (a guess).
type seg struct {
	b      []byte
	caller bool
}

// vreader reads into bufs in order, in one call (readv): it returns the
// bytes read in all, at least 1, or an error; io.EOF at the stream's end.
type vreader interface {
	readv(bufs [][]byte) (int, error)
}

// errBadCount: the source or the vreader broke its contract.
var errBadCount = errors.New("wire: a read returned an impossible count")

// maxEmptyReads bounds reads that return nothing and no error, as bufio.
const maxEmptyReads = 100

// waiting reports whether bytes read past a payload wait in q.
func (s *src) waiting() bool { return s.past != nil && s.qh < s.qn }

// Read is the buffer's source: the bytes read past the last payload first
// (q), then the connection, capped at one chunk header while chunks
// stream.
func (s *src) Read(p []byte) (int, error) {
	if s.waiting() {
		g := &s.q[s.qh]
		n := copy(p, g.b)
		if g.b = g.b[n:]; len(g.b) == 0 {
			s.qh++
		}
		return n, nil
	}
	if s.narrow && len(p) > ChunkHeaderLen {
		p = p[:ChunkHeaderLen]
	}
	if s.past != nil && len(s.armed) > 0 && len(p) == ChunkHeaderLen {
		a := s.armed
		// The reader caught up with the writer: the header it waits for
		// comes with the start of that chunk's payload, which goes where
		// the last payload's read guessed, in this same read.
		s.armed = nil
		n, err := s.readv(p, a, false)
		if err != nil || n <= len(p) {
			return n, err
		}
		return len(p), nil
	}
	return s.r.Read(p)
}

// readv reads into first, then the guesses, with room for a header
// before each one (before the first one too when hdrFirst), and queues
// what it read past first. It returns the bytes read in all.
func (s *src) readv(first []byte, guesses [][]byte, hdrFirst bool) (int, error) {
	k := 0
	add := func(b []byte, mine bool) {
		s.iov[k], s.mine[k] = b, mine
		k++
	}
	add(first, false)
	if hdrFirst {
		add(s.hdrs[0][:], true)
	}
	for i, g := range guesses[:min(len(guesses), MaxAhead)] {
		if len(g) == 0 {
			break
		}
		if i > 0 {
			add(s.hdrs[i][:], true)
		}
		add(g, false)
	}
	n, err := s.v.readv(s.iov[:k])
	total := 0
	for i := range k {
		total += len(s.iov[i])
	}
	if n < 0 || n > total {
		n, err = 0, errBadCount
	}
	s.qh, s.qn = 0, 0
	for i, rest := 1, n-len(first); i < k && rest > 0; i++ {
		m := min(rest, len(s.iov[i]))
		s.q[s.qn] = seg{b: s.iov[i][:m], caller: !s.mine[i]}
		s.qn++
		rest -= m
	}
	clear(s.iov[:k]) // keep no slot reachable
	return n, err
}

// readPayload fills p from the connection (the buffer holds nothing and
// nothing waits: its caller took them), queueing any bytes read past p: a
// header in hdrs and, past it, the guesses.
func (s *src) readPayload(p []byte, guesses [][]byte) error {
	if s.past == nil {
		s.past = new(past)
	}
	for len(p) > 0 && s.waiting() {
		// Not reached (the Reader takes what waits before any payload),
		// but cheap to be right.
		n, _ := s.Read(p)
		p = p[n:]
	}
	empty := 0
	for len(p) > 0 {
		n, err := s.readv(p, guesses, true)
		switch {
		case err != nil:
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		case n == 0:
			if empty++; empty >= maxEmptyReads {
				return io.ErrNoProgress
			}
		case n >= len(p):
			return nil
		}
		p = p[n:]
	}
	return nil
}
