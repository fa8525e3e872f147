package wire

import (
	"bytes"
	"fmt"
	"io"
	"testing"
)

// aheadStream is n large chunks of job 1, blocks 0.., of 64 KiB each, each
// payload distinct, with a Progress after every seventh and, when mixed,
// a chunk of job 2 after every fifth.
func aheadStream(t *testing.T, n int, mixed bool) ([]Message, []byte, [][]byte) {
	t.Helper()
	var ms []Message
	var b []byte
	var payloads [][]byte
	add := func(m Message, p []byte) {
		ms = append(ms, m)
		b = append(b, frame(t, m)...)
		if p != nil {
			payloads = append(payloads, p)
			b = append(b, p...)
		}
	}
	for i := range n {
		p := bytes.Repeat([]byte(fmt.Sprintf("%08d", i)), 64<<10/8+1)[:64<<10]
		add(&Chunk{Job: 1, Block: uint32(i), Len: uint32(len(p))}, p)
		if i%7 == 6 {
			add(&Progress{Job: 1, Bytes: uint64(i)}, nil)
		}
		if mixed && i%5 == 4 {
			add(&Chunk{Job: 2, Block: uint32(i), Len: 20 << 10}, bytes.Repeat([]byte{'x'}, 20<<10))
		}
	}
	add(&Done{Job: 1}, nil)
	return ms, b, payloads
}

// readAhead reads ms from r as the data path does: job 1's block i into
// area[i], guessing that the next payload is block i+1 of job 1; job 2's
// elsewhere (and the next blocks after it, MaxAhead guesses in all). After every frame that is not a chunk it scribbles over the
// area past the last block read: what was read ahead must be back in the
// Reader by then. It checks every frame and payload.
func readAhead(t *testing.T, r *Reader, ms []Message, payloads [][]byte) {
	t.Helper()
	const blk = 64 << 10
	area := make([]byte, (len(ms)+MaxAhead)*blk)
	other := make([]byte, blk)
	p, last := 0, -1
	for i, want := range ms {
		got, err := r.Next()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if got.Type() != want.Type() {
			t.Fatalf("frame %d: %v, want %v", i, got.Type(), want.Type())
		}
		c, ok := got.(*Chunk)
		if !ok {
			for j := (last + 1) * blk; j < len(area); j++ {
				area[j] = 0xa5
			}
			continue
		}
		dst := other[:c.Len]
		if c.Job == 1 {
			dst = area[int(c.Block)*blk:][:c.Len]
			last = int(c.Block)
		}
		var next [][]byte
		for k := 1; k <= MaxAhead; k++ {
			next = append(next, area[(int(c.Block)+k)*blk:][:blk])
		}
		if err := r.ReadPayloadAhead(dst, next); err != nil {
			t.Fatalf("frame %d payload: %v", i, err)
		}
		if !bytes.Equal(dst, payloads[p]) {
			t.Fatalf("frame %d: payload %d differs", i, p)
		}
		p++
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("after the last frame: %v, want EOF", err)
	}
}

// TestReadAhead: reads that cross chunk boundaries land the next payload
// where it goes (hits), and every guess that misses (a Progress, another
// job's chunk between two of job 1's) loses nothing: the frames and
// payloads read are the stream's, whatever the reads return.
func TestReadAhead(t *testing.T) {
	for _, mixed := range []bool{false, true} {
		ms, b, payloads := aheadStream(t, 60, mixed)
		for _, sizes := range [][]int{{1 << 20}, {200 << 10, 7, 90 << 10}, {64<<10 + ChunkHeaderLen + 1000}} {
			br := bytes.NewReader(b)
			r := newReaderV(br, &splitV{r: br, sizes: sizes}, DefaultLimits(), defaultSizes)
			readAhead(t, r, ms, payloads)
			hits, misses := r.AheadStats()
			t.Logf("mixed %v sizes %v: %d hits, %d misses", mixed, sizes, hits, misses)
			if hits == 0 {
				t.Errorf("mixed %v sizes %v: no read ahead landed in place", mixed, sizes)
			}
			if misses == 0 {
				t.Errorf("mixed %v sizes %v: no guess missed, though frames come between chunks", mixed, sizes)
			}
		}
	}
}

// TestReadAheadTCP: the same over a real connection, written in pieces of
// any size.
func TestReadAheadTCP(t *testing.T) {
	a, b := tcpConns(t)
	if newVReader(b) == nil {
		t.Skip("no readv on this platform")
	}
	ms, s, payloads := aheadStream(t, 200, true)
	go func() {
		defer a.Close()
		for len(s) > 0 {
			n := min(len(s), 1+len(s)%(300<<10))
			if _, err := a.Write(s[:n]); err != nil {
				return
			}
			s = s[n:]
		}
	}()
	r := NewReader(b, DefaultLimits())
	readAhead(t, r, ms, payloads)
}

// TestReadAheadArmed: a payload read that ends where the payload does
// leaves its guess armed, and the read that waits for the next header
// brings that chunk's payload into it too: one read per chunk.
func TestReadAheadArmed(t *testing.T) {
	const n = 64 << 10
	// The first payload ends one readv, and each later readv brings a
	// header and that chunk's whole payload.
	hits, misses, calls := scriptedAhead(t, 4, 1, []int{n, ChunkHeaderLen + n, ChunkHeaderLen + n, ChunkHeaderLen + n})
	if hits != 3 || misses != 0 {
		t.Errorf("%d hits, %d misses, want 3 and 0", hits, misses)
	}
	if calls != 4 {
		t.Errorf("%d readv calls for 4 chunks after the first header, want 4", calls)
	}
}

// TestReadAheadSeveral: one read fills several guesses, with the headers
// between them, so a stream of chunks takes a few reads, not one a chunk.
func TestReadAheadSeveral(t *testing.T) {
	const n = 64 << 10
	hits, misses, calls := scriptedAhead(t, 6, MaxAhead, []int{n + 3*(ChunkHeaderLen+n)})
	if hits != 5 || misses != 0 {
		t.Errorf("%d hits, %d misses, want 5 and 0", hits, misses)
	}
	if calls != 2 {
		t.Errorf("%d readv calls for 6 chunks, want 2", calls)
	}
}

// scriptedAhead reads a stream of that many 64 KiB chunks of one job, block i into the
// i-th 64 KiB of an area, guessing the next guesses blocks, through
// readvs of the given sizes. The first header comes alone from a plain
// read (narrow, as after a chunk). It checks every payload and returns the
// Reader's hits and misses and the readv calls.
func scriptedAhead(t *testing.T, chunks, guesses int, sizes []int) (hits, misses uint64, calls int) {
	t.Helper()
	const n = 64 << 10
	ms, b, payloads := aheadStream(t, chunks, false)
	ms, payloads = ms[:chunks], payloads[:chunks]
	b = b[:chunks*(ChunkHeaderLen+n)]
	br := bytes.NewReader(b)
	v := &splitV{r: br, sizes: sizes}
	r := newReaderV(br, v, DefaultLimits(), defaultSizes)
	r.src.narrow = true
	area := make([]byte, (chunks+guesses)*n)
	for i := range ms {
		m, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		c, ok := m.(*Chunk)
		if !ok {
			t.Fatalf("%T, want a chunk", m)
		}
		dst := area[int(c.Block)*n:][:n]
		var next [][]byte
		for k := 1; k <= guesses; k++ {
			next = append(next, area[(int(c.Block)+k)*n:][:n])
		}
		if err := r.ReadPayloadAhead(dst, next); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(dst, payloads[i]) {
			t.Fatalf("payload %d differs", i)
		}
	}
	hits, misses = r.AheadStats()
	return hits, misses, v.calls
}
