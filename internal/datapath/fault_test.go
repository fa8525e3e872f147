package datapath

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// TestCancelMidTransfer cancels a job while its chunks are moving. The
// consumer's emit is held on the first progress event, so over net.Pipe the
// producer cannot finish before the Cancel.
func TestCancelMidTransfer(t *testing.T) {
	na, nb := net.Pipe()
	cfg := Config{BlockBytes: 8192, ChunkBytes: 2048}
	a := startPeer(t, na, cfg, 32)
	b := &peer{mem: newArena(32, cfg.BlockBytes), ev: newSink()}
	gate, held := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c, err := Start(nb, cfg, b.mem, func(e Event) {
		if _, ok := e.(RecvProgress); ok {
			once.Do(func() { close(held); <-gate })
		}
		b.ev.emit(e)
	})
	if err != nil {
		t.Fatal(err)
	}
	b.c = c
	defer a.stop(t)
	defer b.stop(t)

	j := job{id: 5, src: seq(0, 32), dst: seq(0, 32)}
	j.prepare(a, b)
	a.c.Send(j.id, j.blocks(0, 32), true)
	<-held
	a.c.Cancel(j.id)
	close(gate)

	total := uint64(32 * cfg.BlockBytes)
	if e := b.ev.recvEnd(t, j.id); e.OK || e.Bytes == 0 || e.Bytes >= total {
		t.Fatalf("consumer: %+v, want not OK with some but not all bytes", e)
	}
	if e := a.ev.sendEnd(t, j.id); e.OK || e.Bytes >= total {
		t.Fatalf("producer: %+v, want not OK", e)
	}
	// The connection stays usable.
	a.c.Probe(1)
	a.ev.waitFor(t, "ProbeAck", func(e Event) bool { return e == ProbeAck{Seq: 1} })
}

// TestCancelUnknownJob: a Cancel for a job the producer never opened still
// writes a terminal frame; a terminal frame the consumer does not expect is
// ignored.
func TestCancelUnknownJob(t *testing.T) {
	na, nb := tcpPair(t)
	a := startPeer(t, na, testCfg(), 2)
	b := startPeer(t, nb, testCfg(), 2)
	defer a.stop(t)
	defer b.stop(t)

	b.c.Expect(77, []uint32{0, 1})
	a.c.Cancel(77)
	a.c.Cancel(78) // b never expected it
	if e := b.ev.recvEnd(t, 77); e.Job != 77 || e.OK || e.Bytes != 0 || e.Summed {
		t.Fatalf("consumer: %+v, want RecvEnd{77, !OK, 0}", e)
	}
	if e := a.ev.sendEnd(t, 77); e != (SendEnd{Job: 77}) {
		t.Fatalf("producer: %+v", e)
	}
	if e := a.ev.sendEnd(t, 78); e.OK {
		t.Fatalf("producer: %+v", e)
	}
	b.c.Probe(3)
	b.ev.waitFor(t, "ProbeAck", func(e Event) bool { return e == ProbeAck{Seq: 3} })
}

// flipConn flips one payload byte in the write of exactly size bytes
// (a chunk payload: net.Buffers writes it on its own over a non-TCP conn)
// that follows skip such writes, without touching the caller's buffer,
// which is the source arena.
type flipConn struct {
	net.Conn
	size    int
	skip    int
	flipped bool
}

func (f *flipConn) Write(p []byte) (int, error) {
	if f.flipped || len(p) != f.size {
		return f.Conn.Write(p)
	}
	if f.skip > 0 {
		f.skip--
		return f.Conn.Write(p)
	}
	f.flipped = true
	q := append([]byte(nil), p...)
	q[len(q)/2] ^= 0x40
	return f.Conn.Write(q)
}

// TestCorruptChunk: a chunk that fails its CRC32C poisons its job (one
// RecvCorrupt, RecvEnd not OK) and the next job is fine. Small chunks are
// checked by the reader itself; large ones by its helper while the next
// chunk is read (sum.go), with the producer's sums also from its helper
// after the first chunk: both the first chunk and a later one are flipped.
func TestCorruptChunk(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		skip int    // chunk payloads written intact before the flipped one
		want uint32 // the block reported corrupt
	}{
		{Config{BlockBytes: 8192, ChunkBytes: 4096}, 0, 0},
		{Config{BlockBytes: 256 << 10, ChunkBytes: 128 << 10, forceHelpers: true}, 0, 0},
		{Config{BlockBytes: 256 << 10, ChunkBytes: 128 << 10, forceHelpers: true}, 3, 1},
	} {
		testCorruptChunk(t, tc.cfg, tc.skip, tc.want)
	}
}

func testCorruptChunk(t *testing.T, cfg Config, skip int, want uint32) {
	na, nb := net.Pipe()
	a := startPeer(t, &flipConn{Conn: na, size: cfg.ChunkBytes, skip: skip}, cfg, 4)
	b := startPeer(t, nb, cfg, 4)
	defer a.stop(t)
	defer b.stop(t)

	bad := job{id: 1, src: []uint32{0, 1}, dst: []uint32{0, 1}}
	bad.prepare(a, b)
	a.c.Send(bad.id, bad.blocks(0, 2), true)
	if e := b.ev.waitFor(t, "RecvCorrupt", func(e Event) bool { _, ok := e.(RecvCorrupt); return ok }); e != (RecvCorrupt{Job: 1, Block: want}) {
		t.Fatalf("chunk %d skip %d: got %+v, want RecvCorrupt{1, %d}", cfg.ChunkBytes, skip, e, want)
	}
	if e := b.ev.recvEnd(t, bad.id); e.OK {
		t.Fatalf("corrupt job reported %+v", e)
	}
	n := 0
	for _, e := range b.ev.all() {
		if x, ok := e.(RecvEnd); ok && x.Job == bad.id && x.OK {
			t.Fatal("corrupt job reported OK")
		}
		if _, ok := e.(RecvCorrupt); ok {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d RecvCorrupt events, want 1", n)
	}
	if e := a.ev.sendEnd(t, bad.id); !e.OK {
		t.Fatalf("producer: %+v (it cannot know)", e)
	}

	// The next job on the same connection is fine.
	good := job{id: 2, src: []uint32{2, 3}, dst: []uint32{2, 3}}
	good.prepare(a, b)
	a.c.Send(good.id, good.blocks(0, 2), true)
	good.verify(t, a, b)
}

// TestLyingPeer feeds raw frames to a consumer. Every lie closes the Conn
// with ErrProtocol; no byte lands outside the job's slots, and only the
// valid prefix lands inside them.
func TestLyingPeer(t *testing.T) {
	const bb = 1024
	half := make([]byte, bb/2)
	pattern(half, 1, 0)
	valid := nodetest.ChunkFrame(wire.Chunk{Job: 1, Block: 0, Len: bb / 2}, half)
	oversize := nodetest.ChunkFrame(wire.Chunk{Job: 1, Block: 0, Len: 2 * bb}, make([]byte, 2*bb))
	overLimit := nodetest.ChunkFrame(wire.Chunk{Job: 1, Block: 0, Len: 8192}, make([]byte, 8192))
	badLen := append([]byte(nil), valid...)
	binary.BigEndian.PutUint32(badLen, 3) // frame length shorter than the chunk body
	cases := []struct {
		name   string
		bytes  func(t *testing.T) []byte
		landed int // bytes of slot 0 that must hold the valid prefix
	}{
		{"unknown job", func(*testing.T) []byte { return nodetest.ChunkFrame(wire.Chunk{Job: 9, Len: 16}, make([]byte, 16)) }, 0},
		{"block out of range", func(*testing.T) []byte {
			return nodetest.ChunkFrame(wire.Chunk{Job: 1, Block: 2, Len: 16}, make([]byte, 16))
		}, 0},
		{"past block end", func(*testing.T) []byte { return oversize }, 0},
		{"over MaxChunk", func(*testing.T) []byte { return overLimit }, 0},
		{"empty chunk", func(*testing.T) []byte { return nodetest.ChunkFrame(wire.Chunk{Job: 1}, nil) }, 0},
		{"offset gap", func(*testing.T) []byte {
			return append(append([]byte(nil), valid...), nodetest.ChunkFrame(wire.Chunk{Job: 1, Block: 0, Offset: bb/2 + 1, Len: 16}, make([]byte, 16))...)
		}, bb / 2},
		{"offset repeat", func(*testing.T) []byte {
			return append(append([]byte(nil), valid...), valid...)
		}, bb / 2},
		{"chunk after done", func(t *testing.T) []byte {
			return append(nodetest.Frame(t, &wire.Error{Job: 1, Code: wire.ErrAborted}), valid...)
		}, 0},
		{"bad frame length", func(*testing.T) []byte { return badLen }, 0},
		{"garbage", func(*testing.T) []byte { return []byte("\xff\xff\xff\xff this is not a frame at all") }, 0},
		{"control frame", func(t *testing.T) []byte { return nodetest.Frame(t, &wire.Goodbye{Reason: wire.GoodbyeIdle}) }, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data := tc.bytes(t)
			raw, nb := net.Pipe()
			lim := wire.DefaultLimits()
			lim.MaxChunk = 4096
			b := startPeer(t, nb, Config{BlockBytes: bb, ChunkBytes: 512, Limits: lim}, 3)
			b.c.Expect(1, []uint32{0, 2})
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(io.Discard, raw) }()
			go func() { defer wg.Done(); raw.Write(data) }()

			if e := b.ev.closed(t); !errors.Is(e.Err, ErrProtocol) {
				t.Fatalf("Closed{%v}, want ErrProtocol", e.Err)
			}
			raw.Close()
			wg.Wait()
			b.stop(t)
			for _, e := range b.ev.all() {
				if x, ok := e.(RecvEnd); ok && x.OK {
					t.Fatalf("lying peer got %+v", x)
				}
			}
			s0 := b.mem.Slot(0)
			if tc.landed > 0 {
				wantPattern(t, s0[:tc.landed], 1, 0)
			}
			for i, x := range s0[tc.landed:] {
				if x != 0 {
					t.Fatalf("slot 0 byte %d written: %#x", tc.landed+i, x)
				}
			}
			for _, s := range []uint32{1, 2} {
				for i, x := range b.mem.Slot(s) {
					if x != 0 {
						t.Fatalf("slot %d byte %d written: %#x", s, i, x)
					}
				}
			}
		})
	}
}
