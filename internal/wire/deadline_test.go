package wire

import (
	"errors"
	"io"
	"os"
	"testing"
)

// timeoutOnce is a source that fails its reads with a deadline error at
// the given offsets (once each), and otherwise reads from b.
type timeoutOnce struct {
	b   []byte
	off int
	at  map[int]bool
}

func (s *timeoutOnce) Read(p []byte) (int, error) {
	if s.at[s.off] {
		delete(s.at, s.off)
		return 0, os.ErrDeadlineExceeded
	}
	if s.off == len(s.b) {
		return 0, io.EOF
	}
	n := copy(p[:1], s.b[s.off:]) // a byte at a time: every offset is a read
	s.off += n
	return n, nil
}

// TestReaderDeadlineBetweenFrames: a read deadline that passes while the
// Reader waits for a frame's header (none of it read, or part of it)
// leaves it usable: the next Next reads the frame whole. One that passes
// inside a frame's body fails the Reader for good.
func TestReaderDeadlineBetweenFrames(t *testing.T) {
	var b []byte
	var err error
	for _, m := range []Message{&Probe{Seq: 7}, &Probe{Seq: 8}} {
		if b, err = Append(b, m); err != nil {
			t.Fatal(err)
		}
	}
	one := len(b) / 2
	r := NewReader(&timeoutOnce{b: b, at: map[int]bool{0: true, one + 2: true}}, DefaultLimits())
	for _, want := range []uint64{7, 8} {
		m, err := r.Next()
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("before probe %d: %v, %v; want the deadline error", want, m, err)
		}
		m, err = r.Next()
		if p, ok := m.(*Probe); err != nil || !ok || p.Seq != want {
			t.Fatalf("after the deadline: %#v, %v; want probe %d", m, err, want)
		}
	}

	// Inside a body: the Reader has consumed the header, so it is done.
	r = NewReader(&timeoutOnce{b: b, at: map[int]bool{frameHeader + 1: true}}, DefaultLimits())
	if _, err := r.Next(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("deadline inside a body: %v", err)
	}
	if _, err := r.Next(); err == nil {
		t.Fatal("a Reader whose deadline passed inside a frame read on")
	}
}
