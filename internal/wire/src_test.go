package wire

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"testing"
	"time"
)

// splitV is a vreader over the same stream as the Reader's plain source:
// each readv returns the next of sizes (cycled) bytes, a first then b.
type splitV struct {
	r     io.Reader
	sizes []int
	i     int
	calls int
}

func (v *splitV) readv(bufs [][]byte) (int, error) {
	v.calls++
	k := 1
	if len(v.sizes) > 0 {
		k = max(v.sizes[v.i%len(v.sizes)], 1)
		v.i++
	}
	n := 0
	var err error
	for _, p := range bufs {
		if n >= k || err != nil {
			break
		}
		var m int
		m, err = io.ReadFull(v.r, p[:min(k-n, len(p))])
		n += m
	}
	if n > 0 {
		return n, nil
	}
	if err == io.ErrUnexpectedEOF {
		err = io.EOF
	}
	return 0, err
}

// counting counts the bytes read through it: what went through bufio.
type counting struct {
	r io.Reader
	n int
}

func (c *counting) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// chunkStream is large chunks with control frames between some of them.
func chunkStream(t testing.TB, rng *rand.Rand, n int) ([]Message, []byte, [][]byte) {
	var ms []Message
	for i := range n {
		ms = append(ms, &Chunk{Job: uint64(i%5 + 1), Block: uint32(i), Len: uint32(16<<10 + rng.IntN(240<<10)), CRC: uint32(i)})
		switch rng.IntN(10) {
		case 0:
			ms = append(ms, &Progress{Job: uint64(i), Bytes: 7})
		case 1:
			ms = append(ms, &Chunk{Job: 9, Len: uint32(1 + rng.IntN(3000))}) // small: through bufio
		}
	}
	ms = append(ms, &Done{Job: 1, Bytes: 3})
	b, payloads := stream(t, ms...)
	return ms, b, payloads
}

// readAll reads every frame of ms, with the payloads, and checks them.
func readAll(t *testing.T, r *Reader, ms []Message, payloads [][]byte) {
	t.Helper()
	dst := make([]byte, 256<<10)
	p := 0
	for i, want := range ms {
		got, err := r.Next()
		if err != nil {
			t.Fatalf("frame %d (%T): %v", i, want, err)
		}
		if w, ok := want.(*Chunk); ok {
			if c, ok := got.(*Chunk); !ok || *c != *w {
				t.Fatalf("frame %d = %+v, want %+v", i, got, want)
			}
			if err := r.ReadPayload(dst[:w.Len]); err != nil {
				t.Fatalf("frame %d payload: %v", i, err)
			}
			if !bytes.Equal(dst[:w.Len], payloads[p]) {
				t.Fatalf("frame %d: payload differs", i)
			}
			p++
			continue
		}
		b1, _ := Append(nil, got)
		b2, _ := Append(nil, want)
		if !bytes.Equal(b1, b2) {
			t.Fatalf("frame %d = %+v, want %+v", i, got, want)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

// TestReadvPayloads: large payloads come through readv, not bufio,
// whatever sizes the reads return. What bufio reads is the frames that are
// not large payloads, at most a header's worth past each, and, for a large
// chunk after a frame that is not a chunk (or first), up to its buffer of
// payload: a frame other than a chunk turns full reads back on.
func TestReadvPayloads(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ms, b, payloads := chunkStream(t, rng, 60)
	allowed := len(b)
	chunkBefore := false
	for _, m := range ms {
		c, ok := m.(*Chunk)
		if ok && c.Len >= narrowMin {
			allowed -= int(c.Len)
			if !chunkBefore {
				allowed += readBufSize
			}
		}
		allowed += ChunkHeaderLen
		chunkBefore = ok
	}
	if allowed > len(b)/4 {
		t.Fatalf("the stream has too few large chunks in a row (%d of %d bytes may go through bufio)", allowed, len(b))
	}
	for _, sizes := range [][]int{nil, {1 << 20}, {7, 100 << 10, 30, 3}, {ChunkHeaderLen + 1}} {
		br := bytes.NewReader(b)
		c := &counting{r: br}
		r := newReaderV(c, &splitV{r: br, sizes: sizes}, DefaultLimits(), defaultSizes)
		readAll(t, r, ms, payloads)
		if c.n > allowed {
			t.Errorf("sizes %v: %d bytes through bufio, want at most %d", sizes, c.n, allowed)
		}
	}
}

// TestReadvTCP: the Reader of a TCP connection reads payloads with readv
// (Linux), as the plain Reader would, through writes of any size.
func TestReadvTCP(t *testing.T) {
	a, b := tcpConns(t)
	if newVReader(b) == nil {
		t.Skip("no readv on this platform")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	ms, s, payloads := chunkStream(t, rng, 80)
	go func() {
		defer a.Close()
		for len(s) > 0 {
			n := min(len(s), 1+rng.IntN(300<<10))
			if _, err := a.Write(s[:n]); err != nil {
				return
			}
			s = s[n:]
		}
	}()
	r := NewReader(b, DefaultLimits())
	if r.src.v == nil {
		t.Fatal("a TCP connection's Reader has no readv")
	}
	readAll(t, r, ms, payloads)
}

// TestReadvDeadline: a read deadline stops a readv that waits for payload.
func TestReadvDeadline(t *testing.T) {
	a, b := tcpConns(t)
	defer a.Close()
	s, _ := stream(t, &Chunk{Job: 1, Len: 64 << 10})
	if _, err := a.Write(s[:len(s)-100]); err != nil {
		t.Fatal(err)
	}
	r := NewReader(b, DefaultLimits())
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	b.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	err := r.ReadPayload(make([]byte, 64<<10))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("ReadPayload past the deadline: %v, want os.ErrDeadlineExceeded", err)
	}
}

func tcpConns(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept()
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}
