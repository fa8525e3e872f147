package wire

import (
	"testing"
)

// segReader returns one segment per Read (the rest of it on the next, when
// p is short): each segment is what one read of the socket brings.
type segReader struct {
	segs [][]byte
}

func (s *segReader) Read(p []byte) (int, error) {
	for len(s.segs) > 0 && len(s.segs[0]) == 0 {
		s.segs = s.segs[1:]
	}
	if len(s.segs) == 0 {
		return 0, nil // a socket with nothing yet; the tests never read that far
	}
	n := copy(p, s.segs[0])
	s.segs[0] = s.segs[0][n:]
	return n, nil
}

// readv reads from the current segment only, as a socket's readv returns
// what has arrived.
func (s *segReader) readv(bufs [][]byte) (int, error) {
	n, _ := s.Read(bufs[0])
	for _, p := range bufs[1:] {
		if n < len(bufs[0]) || len(s.segs) == 0 {
			break
		}
		m := copy(p, s.segs[0])
		s.segs[0] = s.segs[0][m:]
		n += m
		if m < len(p) {
			break
		}
	}
	return n, nil
}

// split cuts b into segments of n bytes.
func split(b []byte, n int) [][]byte {
	var segs [][]byte
	for len(b) > n {
		segs = append(segs, b[:n])
		b = b[n:]
	}
	return append(segs, b)
}

// next reads one frame and, for a chunk, its payload.
func next(t *testing.T, r *Reader) Message {
	t.Helper()
	m, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := m.(*Chunk); ok {
		if err := r.ReadPayload(make([]byte, c.Len)); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// TestReaderShrinksAfterLargeFrame: a Reader that grew for one large frame
// keeps its buffer while reads come full or bring a large frame, and gives
// it back after quietReads small reads in a row (on a real connection, a
// heartbeat interval apart), not one read earlier. Two small frames in one
// read (a Ping and a Pong) are one small read.
func TestReaderShrinksAfterLargeFrame(t *testing.T) {
	big := frame(t, &Lookup{ReqID: "r", Keys: keys(6000)}) // 96 KB, over readBufSize
	ping := frame(t, &Ping{Seq: 1})
	two := append(append([]byte(nil), ping...), ping...)
	var many []byte // over idleSize in one read
	for range 40 {
		many = append(many, ping...)
	}
	medium := frame(t, &Lookup{ReqID: "r", Keys: keys(100)}) // over idleSize
	src := &segReader{segs: [][]byte{big}}
	r := NewReader(src, DefaultLimits())
	if r.b.heap() {
		t.Fatal("a new Reader holds a heap buffer")
	}
	next(t, r)
	if !r.b.heap() || len(r.b.buf) < len(big)-frameHeader {
		t.Fatalf("after a %d-byte frame the buffer is %d bytes (heap %v)", len(big), len(r.b.buf), r.b.heap())
	}
	// Small reads, then a read over idleSize; small reads, then a frame
	// over idleSize that comes in small reads: each starts the count over.
	for _, reset := range [][][]byte{{many}, split(medium, 100)} {
		for range quietReads - 1 {
			src.segs = append(src.segs, two)
			next(t, r)
			next(t, r)
		}
		src.segs = append(src.segs, reset...)
		for range len(many) / len(ping) {
			if m := next(t, r); m.Type() == TypeLookup {
				break
			}
		}
		if !r.b.heap() {
			t.Fatalf("buffer given back with %d small reads and %d more reads after them", quietReads-1, len(reset))
		}
	}
	for i := range quietReads {
		src.segs = append(src.segs, two)
		next(t, r)
		next(t, r)
		if want := i < quietReads-1; r.b.heap() != want {
			t.Fatalf("small read %d of %d: heap buffer %v, want %v", i+1, quietReads, r.b.heap(), want)
		}
	}
	if len(r.b.buf) != idleSize {
		t.Fatalf("idle buffer %d bytes, want %d", len(r.b.buf), idleSize)
	}
}

// TestReaderReleaseKeepsBuffered: the heap buffer goes with bytes still
// buffered when they fit in idle, and they are read from there.
func TestReaderReleaseKeepsBuffered(t *testing.T) {
	ping := frame(t, &Ping{Seq: 1})
	src := &segReader{segs: [][]byte{frame(t, &Lookup{ReqID: "r", Keys: keys(100)})}}
	for i := range quietReads {
		seg := frame(t, &Ping{Seq: uint64(i)})
		if i == quietReads-1 {
			seg = append(seg, ping[:5]...) // the next frame's first bytes
		}
		src.segs = append(src.segs, seg)
	}
	src.segs = append(src.segs, ping[5:])
	r := NewReader(src, DefaultLimits())
	for range 1 + quietReads {
		next(t, r)
	}
	if r.b.heap() || r.b.buffered() != 5 {
		t.Fatalf("heap buffer %v, %d bytes buffered; want the idle buffer holding 5", r.b.heap(), r.b.buffered())
	}
	if m := next(t, r); m.(*Ping).Seq != 1 {
		t.Fatalf("the frame across the release: %+v", m)
	}
}

// TestReaderStreamGrowsNoChunkRelease: while small chunks stream, reads
// fill the buffer, which doubles up to readBufSize and stays there: a
// chunk starts the count of small reads over, so the small reads between
// bursts (quietReads-1 of them here) do not give it back. Once the stream
// stops, the quietReads-th small read does.
func TestReaderStreamGrowsNoChunkRelease(t *testing.T) {
	var burst []byte // 64 chunks of 4 KiB with a Progress after each, then a chunk
	for i := range 64 {
		s, _ := stream(t, &Chunk{Job: 1, Block: uint32(i), Len: 4 << 10}, &Progress{Job: 1, Bytes: 1})
		burst = append(burst, s...)
	}
	last, _ := stream(t, &Chunk{Job: 1, Block: 64, Len: 4 << 10})
	burst = append(burst, last...)
	ping := frame(t, &Ping{Seq: 1})
	src := &segReader{}
	r := NewReader(src, DefaultLimits())
	for round := range 3 {
		src.segs = append(src.segs, burst)
		for i := range 2*64 + 1 {
			next(t, r)
			if round > 0 && len(r.b.buf) != readBufSize {
				t.Fatalf("round %d, frame %d: buffer %d bytes, want %d throughout", round, i, len(r.b.buf), readBufSize)
			}
		}
		if len(r.b.buf) != readBufSize {
			t.Fatalf("round %d: buffer %d bytes after a burst, want %d", round, len(r.b.buf), readBufSize)
		}
		for range quietReads - 1 {
			src.segs = append(src.segs, ping)
			next(t, r)
		}
		if len(r.b.buf) != readBufSize {
			t.Fatalf("round %d: buffer %d bytes after %d small reads, want %d", round, len(r.b.buf), quietReads-1, readBufSize)
		}
	}
	src.segs = append(src.segs, ping)
	next(t, r)
	if r.b.heap() {
		t.Fatalf("after %d small reads: still a %d-byte buffer", quietReads, len(r.b.buf))
	}
}

// TestReaderIdleAllocs: an idle connection's frames allocate nothing: the
// idle buffer is inside the Reader.
func TestReaderIdleAllocs(t *testing.T) {
	probe := frame(t, &Probe{Seq: 0})
	r := NewReader(&cycleReader{buf: probe}, DefaultLimits())
	if n := testing.AllocsPerRun(100, func() { next(t, r) }); n != 0 || r.b.heap() {
		t.Fatalf("%v allocations per keepalive (heap buffer %v), want 0", n, r.b.heap())
	}
}

// TestReaderChunksKeepBuffer: with readv, each large chunk's header comes
// in a small read of its own (from what was read past a payload, or capped at a header), yet a
// chunk starts the count over: a load does not give the buffer back
// between its chunks.
func TestReaderChunksKeepBuffer(t *testing.T) {
	src := &segReader{segs: [][]byte{frame(t, &Lookup{ReqID: "r", Keys: keys(100)})}}
	for i := range 2 * quietReads {
		s, _ := stream(t, &Chunk{Job: 1, Block: uint32(i), Len: narrowMin})
		src.segs = append(src.segs, s)
	}
	ping := frame(t, &Ping{Seq: 1})
	for range quietReads {
		src.segs = append(src.segs, ping)
	}
	r := newReaderV(src, src, DefaultLimits(), defaultSizes)
	next(t, r)
	for i := range 2 * quietReads {
		next(t, r)
		if !r.b.heap() {
			t.Fatalf("chunk %d: buffer given back during a load", i)
		}
	}
	for range quietReads {
		next(t, r)
	}
	if r.b.heap() {
		t.Fatalf("after %d small reads: still a %d-byte buffer", quietReads, len(r.b.buf))
	}
}

// TestReaderLargeChunksIdleBuffer: with readv, a load of large chunks
// never needs more than the idle buffer, even when the first chunk's
// header comes with a buffer-full of its payload.
func TestReaderLargeChunksIdleBuffer(t *testing.T) {
	src := &segReader{}
	for i := range 8 {
		s, _ := stream(t, &Chunk{Job: 1, Block: uint32(i), Len: narrowMin})
		src.segs = append(src.segs, s)
	}
	r := newReaderV(src, src, DefaultLimits(), defaultSizes)
	for i := range 8 {
		next(t, r)
		if r.b.heap() {
			t.Fatalf("chunk %d: a %d-byte heap buffer", i, len(r.b.buf))
		}
	}
}
