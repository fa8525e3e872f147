package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"testing"
)

// stream appends the frames of ms, and for each *Chunk a payload of Len
// bytes derived from its Job, returning the stream and the payloads.
func stream(t testing.TB, ms ...Message) ([]byte, [][]byte) {
	t.Helper()
	var b []byte
	var payloads [][]byte
	for _, m := range ms {
		b = append(b, frame(t, m)...)
		if c, ok := m.(*Chunk); ok {
			p := bytes.Repeat([]byte{byte(c.Job)}, int(c.Len))
			payloads = append(payloads, p)
			b = append(b, p...)
		}
	}
	return b, payloads
}

func TestReaderSamples(t *testing.T) {
	ms := samples()
	b, _ := stream(t, ms...)
	// With the default sizes most frames fit the idle buffer; with tiny
	// ones nearly every frame makes it grow.
	for _, size := range []bufSizes{defaultSizes, tinySizes} {
		r := newReaderSize(bytes.NewReader(b), DefaultLimits(), size)
		for i, want := range ms {
			got, err := r.Next()
			if err != nil {
				t.Fatalf("size %+v: frame %d (%T): %v", size, i, want, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("size %+v: frame %d = %+v, want %+v", size, i, got, want)
			}
			if err := r.DiscardPayload(); err != nil {
				t.Fatal(err)
			}
		}
		for range 2 { // io.EOF, bare, and sticky
			if m, err := r.Next(); err != io.EOF || m != nil {
				t.Fatalf("size %+v: after the last frame: %v, %v; want io.EOF", size, m, err)
			}
		}
		if len(r.b.buf) > maxBuf(DefaultLimits(), size) {
			t.Fatalf("buffer grew to %d", len(r.b.buf))
		}
	}
}

func TestReaderChunkPayload(t *testing.T) {
	c1 := &Chunk{Job: 1, Block: 0, Offset: 0, Len: 100 << 10} // larger than the bufio buffer
	c2 := &Chunk{Job: 2, Block: 1, Offset: 64, Len: 10}
	c3 := &Chunk{Job: 3} // empty payload: nothing to consume
	b, payloads := stream(t, c1, &Progress{Job: 1, Bytes: 5}, c2, c3, c2, &Done{Job: 2})
	r := NewReader(bytes.NewReader(b), DefaultLimits())

	m, err := r.Next()
	if c, ok := m.(*Chunk); err != nil || !ok || *c != *c1 {
		t.Fatalf("Next = %+v, %v; want %+v", m, err, c1)
	}
	if _, err := r.Next(); !errors.Is(err, ErrUsage) {
		t.Fatalf("Next with the payload unread: %v, want ErrUsage", err)
	}
	if err := r.ReadPayload(make([]byte, 10)); !errors.Is(err, ErrUsage) {
		t.Fatalf("ReadPayload into a short dst: %v, want ErrUsage", err)
	}
	dst := make([]byte, c1.Len)
	if err := r.ReadPayload(dst); err != nil || !bytes.Equal(dst, payloads[0]) {
		t.Fatalf("ReadPayload: %v", err)
	}
	if err := r.ReadPayload(dst); !errors.Is(err, ErrUsage) {
		t.Fatalf("second ReadPayload: %v, want ErrUsage", err)
	}
	if m, err := r.Next(); err != nil || *m.(*Progress) != (Progress{Job: 1, Bytes: 5}) {
		t.Fatalf("Next = %+v, %v", m, err)
	}
	m, err = r.Next()
	if err != nil || *m.(*Chunk) != *c2 {
		t.Fatalf("Next = %+v, %v", m, err)
	}
	first := m
	if err := r.ReadPayload(dst[:c2.Len]); err != nil || !bytes.Equal(dst[:c2.Len], payloads[1]) {
		t.Fatalf("ReadPayload: %v", err)
	}
	if m, err := r.Next(); err != nil || *m.(*Chunk) != *c3 {
		t.Fatalf("Next = %+v, %v", m, err)
	}
	m, err = r.Next()
	if err != nil || *m.(*Chunk) != *c2 || m != first {
		t.Fatalf("Next = %+v (%p), %v; want %+v in the reused struct %p", m, m, err, c2, first)
	}
	if err := r.DiscardPayload(); err != nil {
		t.Fatal(err)
	}
	if m, err := r.Next(); err != nil || *m.(*Done) != (Done{Job: 2}) {
		t.Fatalf("Next = %+v, %v", m, err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("Next at the end: %v", err)
	}
}

// header returns a frame header claiming n bytes after the length.
func header(n uint32, version uint8, typ Type) []byte {
	return append(binary.BigEndian.AppendUint32(nil, n), version, byte(typ))
}

func TestReaderRefusesOversizedFrame(t *testing.T) {
	g := frame(t, &Goodbye{Detail: "0123456789"})
	for _, tc := range []struct {
		maxFrame uint32
		want     error
	}{
		{uint32(len(g)), nil}, // MaxFrame counts the whole frame
		{uint32(len(g)) - 1, ErrTooLarge},
	} {
		lim := DefaultLimits()
		lim.MaxFrame = tc.maxFrame
		_, err := newReaderSize(bytes.NewReader(g), lim, tinySizes).Next()
		if !errors.Is(err, tc.want) && err != tc.want {
			t.Errorf("MaxFrame %d, frame %d: %v, want %v", tc.maxFrame, len(g), err, tc.want)
		}
	}

	// Only a header claiming 4 GiB: refusal must come from the length alone,
	// before reading (else io.ErrUnexpectedEOF) or allocating the body.
	r := newReaderSize(bytes.NewReader(header(1<<32-1, Version, TypeLookup)), DefaultLimits(), tinySizes)
	if _, err := r.Next(); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Next: %v, want ErrTooLarge", err)
	}
	if r.b.heap() {
		t.Fatalf("allocated %d bytes for a refused frame", len(r.b.buf))
	}
	if _, err := r.Next(); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("second Next: %v, want the sticky ErrTooLarge", err)
	}
}

func TestReaderRefusesBadHeaders(t *testing.T) {
	ping := frame(t, &Ping{Seq: 1})
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"version 0", append(header(10, 0, TypePing), ping[6:]...), ErrVersion},
		{"version 1", append(header(10, 1, TypePing), ping[6:]...), ErrVersion},
		{"version 2 (before the attach secret)", append(header(10, 2, TypePing), ping[6:]...), ErrVersion},
		{"version 3 (before Summary)", append(header(10, 3, TypePing), ping[6:]...), ErrVersion},
		{"version 4 (before LookupPending)", append(header(10, 4, TypePing), ping[6:]...), ErrVersion},
		{"version 6", append(header(10, 6, TypePing), ping[6:]...), ErrVersion},
		{"length 1", append(header(1, Version, TypePing), ping...), ErrMalformed},
		{"unknown type", append(header(10, Version, 200), ping[6:]...), ErrUnknownType},
		{"bad body", append(header(11, Version, TypePing), append(ping[6:], 0)...), ErrMalformed},
	} {
		r := NewReader(bytes.NewReader(append(tc.b, ping...)), DefaultLimits())
		for i := range 2 { // the error is sticky: the following good frame is not read
			if m, err := r.Next(); !errors.Is(err, tc.want) || m != nil {
				t.Errorf("%s: Next #%d = %v, %v; want %v", tc.name, i, m, err, tc.want)
			}
		}
	}
}

// TestReaderTruncated cuts a stream at every byte: a cut between frames is
// a clean io.EOF, anywhere else io.ErrUnexpectedEOF.
func TestReaderTruncated(t *testing.T) {
	ms := []Message{&Ping{Seq: 1}, &Chunk{Job: 1, Len: 20}, &Lookup{ReqID: "r", Keys: keys(3)}}
	b, _ := stream(t, ms...)
	boundaries := map[int]bool{0: true}
	n := 0
	for _, m := range ms {
		n += len(frame(t, m))
		if c, ok := m.(*Chunk); ok {
			n += int(c.Len)
		}
		boundaries[n] = true
	}
	for _, size := range []bufSizes{defaultSizes, tinySizes} {
		for cut := 0; cut < len(b); cut++ {
			r := newReaderSize(bytes.NewReader(b[:cut]), DefaultLimits(), size)
			var err error
			for err == nil {
				var m Message
				if m, err = r.Next(); err == nil {
					if c, ok := m.(*Chunk); ok {
						err = r.ReadPayload(make([]byte, c.Len))
					}
				}
			}
			if boundaries[cut] && err != io.EOF {
				t.Errorf("size %+v, cut at boundary %d: %v, want io.EOF", size, cut, err)
			}
			if !boundaries[cut] && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("size %+v, cut at %d: %v, want io.ErrUnexpectedEOF", size, cut, err)
			}
		}
	}
}

type failingReader struct{ err error }

func (f failingReader) Read([]byte) (int, error) { return 0, f.err }

func TestReaderWrapsStreamErrors(t *testing.T) {
	boom := errors.New("connection reset")
	r := NewReader(failingReader{boom}, DefaultLimits())
	if _, err := r.Next(); !errors.Is(err, boom) {
		t.Fatalf("Next: %v, want it to wrap %v", err, boom)
	}
}

func TestReaderSteadyStateAllocs(t *testing.T) {
	ms := []Message{
		&Chunk{Job: 1, Len: 4096}, &Chunk{Job: 1, Offset: 4096, Len: 100 << 10},
		&Progress{Job: 1, Bytes: 8192}, &Done{Job: 1, Bytes: 8192}, &Probe{Seq: 1}, &ProbeAck{Seq: 1},
	}
	b, _ := stream(t, ms...)
	r := NewReader(&cycleReader{buf: b}, DefaultLimits())
	dst := make([]byte, 100<<10)
	allocs := testing.AllocsPerRun(100, func() {
		for range ms {
			m, err := r.Next()
			if err != nil {
				t.Fatal(err)
			}
			if c, ok := m.(*Chunk); ok {
				if err := r.ReadPayload(dst[:c.Len]); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per round of data-path frames, want 0", allocs)
	}
}

func TestAppendAllocs(t *testing.T) {
	buf := make([]byte, 0, 256)
	c := &Chunk{Job: 1, Len: 4096}
	if n := testing.AllocsPerRun(100, func() { buf = AppendChunkHeader(buf[:0], c) }); n != 0 {
		t.Errorf("AppendChunkHeader: %v allocations, want 0", n)
	}
	var p Message = &Progress{Job: 1, Bytes: 2}
	if n := testing.AllocsPerRun(100, func() { buf, _ = Append(buf[:0], p) }); n != 0 {
		t.Errorf("Append(*Progress): %v allocations, want 0", n)
	}
}
