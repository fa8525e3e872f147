package datapath

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// testCfg has blocks that split into three full chunks and a short one.
func testCfg() Config {
	return Config{BlockBytes: 10000, ChunkBytes: 3000}
}

// job is a test job: n blocks from producer slots src into consumer slots dst.
type job struct {
	id       uint64
	src, dst []uint32
}

func (j job) blocks(from, to int) []Block {
	var bs []Block
	for i := from; i < to; i++ {
		bs = append(bs, Block{Index: uint32(i), Slot: j.src[i]})
	}
	return bs
}

// prepare fills the job's source slots and registers its destination.
func (j job) prepare(prod, cons *peer) {
	for i, s := range j.src {
		pattern(prod.mem.Slot(s), j.id, uint32(i))
	}
	cons.c.Expect(j.id, j.dst)
}

func (j job) verify(t *testing.T, prod, cons *peer) {
	t.Helper()
	if e := cons.ev.recvEnd(t, j.id); !e.OK || e.Bytes != uint64(len(j.dst))*uint64(cons.c.cfg.BlockBytes) {
		t.Fatalf("consumer: %+v, want OK with all bytes", e)
	}
	if e := prod.ev.sendEnd(t, j.id); !e.OK || e.Bytes != uint64(len(j.src))*uint64(prod.c.cfg.BlockBytes) {
		t.Fatalf("producer: %+v, want OK with all bytes", e)
	}
	for i, s := range j.dst {
		wantPattern(t, cons.mem.Slot(s), j.id, uint32(i))
	}
}

func seq(from, n int) []uint32 {
	s := make([]uint32, n)
	for i := range s {
		s[i] = uint32(from + i)
	}
	return s
}

// TestTransferInterleaved streams several jobs in both directions at once,
// with Send calls for different jobs interleaved.
func TestTransferInterleaved(t *testing.T) {
	for _, pc := range pairs {
		t.Run(pc.name, func(t *testing.T) {
			na, nb := pc.make(t)
			a := startPeer(t, na, testCfg(), 40)
			b := startPeer(t, nb, testCfg(), 40)
			defer a.stop(t)
			defer b.stop(t)

			// a produces jobs 1-4 into b; b produces job 10 into a.
			var ab []job
			for k := range 4 {
				ab = append(ab, job{id: uint64(k + 1), src: seq(k*5, 5), dst: seq(39-k*5-4, 5)})
			}
			ba := job{id: 10, src: seq(0, 7), dst: seq(30, 7)}
			for _, j := range ab {
				j.prepare(a, b)
			}
			ba.prepare(b, a)

			b.c.Send(ba.id, ba.blocks(0, 3), false)
			a.c.Send(1, ab[0].blocks(0, 2), false)
			a.c.Send(2, ab[1].blocks(0, 5), true)
			a.c.Open(3)
			a.c.Send(1, ab[0].blocks(2, 5), true)
			a.c.Send(4, ab[3].blocks(0, 1), false)
			b.c.Send(ba.id, ba.blocks(3, 7), true)
			a.c.Send(3, ab[2].blocks(0, 5), true)
			a.c.Send(4, ab[3].blocks(1, 5), true)

			for _, j := range ab {
				j.verify(t, a, b)
			}
			ba.verify(t, b, a)
		})
	}
}

// TestSendInPieces sends one block per call and ends with an empty last Send.
func TestSendInPieces(t *testing.T) {
	na, nb := pairs[1].make(t)
	a := startPeer(t, na, testCfg(), 8)
	b := startPeer(t, nb, testCfg(), 8)
	defer a.stop(t)
	defer b.stop(t)

	j := job{id: 7, src: []uint32{3, 1, 4, 0}, dst: []uint32{5, 2, 7, 6}}
	j.prepare(a, b)
	a.c.Open(j.id)
	for i := range j.src {
		a.c.Send(j.id, j.blocks(i, i+1), false)
	}
	a.c.Send(j.id, nil, true)
	j.verify(t, a, b)
}

// TestRoundRobin checks that a small job sent after a big one finishes
// first: the writer serves jobs a chunk at a time. The consumer reads
// nothing until both jobs are queued (gatedConn), so the writer cannot
// finish the big job before the small one is sent, however late this
// goroutine runs.
func TestRoundRobin(t *testing.T) {
	na, nb := pairs[0].make(t) // net.Pipe: no socket buffer to hide the order
	gate := make(chan struct{})
	cfg := Config{BlockBytes: 4096, ChunkBytes: 1024}
	a := startPeer(t, na, cfg, 64)
	b := startPeer(t, gatedConn{nb, gate}, cfg, 64)
	defer a.stop(t)
	defer b.stop(t)

	big := job{id: 1, src: seq(0, 60), dst: seq(0, 60)}
	small := job{id: 2, src: seq(60, 2), dst: seq(60, 2)}
	big.prepare(a, b)
	small.prepare(a, b)
	a.c.Send(big.id, big.blocks(0, 60), true)
	a.c.Send(small.id, small.blocks(0, 2), true)
	close(gate)

	first := b.ev.waitFor(t, "RecvEnd", func(e Event) bool { _, ok := e.(RecvEnd); return ok }).(RecvEnd)
	if first.Job != small.id {
		t.Fatalf("first RecvEnd is job %d, want the small job %d", first.Job, small.id)
	}
	small.verify(t, a, b)
	big.verify(t, a, b)
}

// gatedConn reads nothing until gate is closed.
type gatedConn struct {
	net.Conn
	gate chan struct{}
}

func (g gatedConn) Read(p []byte) (int, error) {
	<-g.gate
	return g.Conn.Read(p)
}

func TestProbeRoundTrip(t *testing.T) {
	for _, pc := range pairs {
		t.Run(pc.name, func(t *testing.T) {
			na, nb := pc.make(t)
			a := startPeer(t, na, testCfg(), 1)
			b := startPeer(t, nb, testCfg(), 1)
			defer a.stop(t)
			defer b.stop(t)
			a.c.Probe(42)
			b.c.Probe(7)
			a.ev.waitFor(t, "ProbeAck 42", func(e Event) bool { return e == ProbeAck{Seq: 42} })
			b.ev.waitFor(t, "ProbeAck 7", func(e Event) bool { return e == ProbeAck{Seq: 7} })
		})
	}
}

// TestClose checks that Close ends both sides with exactly one Closed each,
// and that calls after Close neither block nor panic.
func TestClose(t *testing.T) {
	for _, pc := range pairs {
		t.Run(pc.name, func(t *testing.T) {
			na, nb := pc.make(t)
			a := startPeer(t, na, testCfg(), 2)
			b := startPeer(t, nb, testCfg(), 2)
			b.c.Expect(1, []uint32{0, 1})
			a.c.Close()
			if e := a.ev.closed(t); !errors.Is(e.Err, ErrClosed) {
				t.Errorf("closing side: Closed{%v}, want ErrClosed", e.Err)
			}
			if e := b.ev.closed(t); e.Err == nil || errors.Is(e.Err, ErrClosed) || errors.Is(e.Err, ErrProtocol) {
				t.Errorf("other side: Closed{%v}, want the I/O error", e.Err)
			}
			a.c.Send(1, []Block{{Index: 0, Slot: 0}}, true)
			a.c.Cancel(1)
			a.c.Probe(1)
			a.c.Close()
			a.stop(t)
			b.stop(t)
		})
	}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{BlockBytes: -1},
		{BlockBytes: 1 << 30},
		{BlockBytes: 4096, ChunkBytes: 64 << 20},
		{BlockBytes: 4096, ProgressInterval: -1},
	} {
		if _, err := Start(nil, cfg, newArena(1, 1), func(Event) {}); err == nil {
			t.Errorf("Start with %+v: no error", cfg)
		}
	}
}

// TestStartWithReader: the node reads DataAttach through a wire.Reader that
// also buffered the frame after it (a Probe); the Conn must read on through
// that Reader, answer the Probe, and then take chunks as usual.
func TestStartWithReader(t *testing.T) {
	raw, nb := net.Pipe()
	payload := make([]byte, 64)
	pattern(payload, 3, 0)
	first := append(nodetest.Frame(t, &wire.DataAttach{PeerID: "10.0.0.1:7777", Incarnation: 1}), nodetest.Frame(t, &wire.Probe{Seq: 9})...)
	second := append(nodetest.ChunkFrame(wire.Chunk{Job: 3, Len: 64}, payload), nodetest.Frame(t, &wire.Done{Job: 3, Bytes: 64})...)
	expected := make(chan struct{})
	acked := make(chan error, 1)
	go func() { // ends when raw is closed
		raw.Write(first)
		rr := wire.NewReader(raw, wire.DefaultLimits())
		for {
			m, err := rr.Next()
			if err != nil {
				acked <- err
				return
			}
			if a, ok := m.(*wire.ProbeAck); ok && a.Seq == 9 {
				break
			}
		}
		acked <- nil
		<-expected
		raw.Write(second)
		io.Copy(io.Discard, raw)
	}()

	rd := wire.NewReader(nb, wire.DefaultLimits())
	if m, err := rd.Next(); err != nil || m.Type() != wire.TypeDataAttach {
		t.Fatalf("first frame: %v, %v", m, err)
	}
	p := &peer{mem: newArena(1, 64), ev: newSink()}
	var err error
	if p.c, err = StartWithReader(nb, rd, Config{BlockBytes: 64}, p.mem, p.ev.emit); err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	defer p.stop(t)
	if err := <-acked; err != nil {
		t.Fatalf("no ProbeAck for the buffered Probe: %v", err)
	}
	p.c.Expect(3, []uint32{0})
	close(expected)
	if e := p.ev.recvEnd(t, 3); !e.OK {
		t.Fatalf("%+v", e)
	}
	wantPattern(t, p.mem.Slot(0), 3, 0)
}

// TestSendWindow checks that the writer streams at most SendWindow jobs at
// once, oldest first: a third job gets no chunk until one of the first two
// has ended, so under load jobs finish one after another at the link's
// speed rather than all together.
func TestSendWindow(t *testing.T) {
	na, nb := pairs[0].make(t) // net.Pipe: no socket buffer to hide the order
	cfg := Config{BlockBytes: 4096, ChunkBytes: 1024, SendWindow: 2}
	a := startPeer(t, na, cfg, 64)
	b := startPeer(t, nb, cfg, 64)
	defer a.stop(t)
	defer b.stop(t)

	jobs := []job{
		{id: 1, src: seq(0, 20), dst: seq(0, 20)},
		{id: 2, src: seq(20, 20), dst: seq(20, 20)},
		{id: 3, src: seq(40, 20), dst: seq(40, 20)},
	}
	for _, j := range jobs {
		j.prepare(a, b)
	}
	// Job 3 is opened first and gets its blocks before jobs 1 and 2 are
	// opened: had its blocks come last, jobs 1 and 2 could have had the
	// window to themselves until they arrived, and job 2 a chunk before
	// the window's order applied (a race in this test, not the writer).
	a.c.Send(3, nil, false)
	a.c.Send(3, jobs[2].blocks(0, 20), true)
	a.c.Send(1, jobs[0].blocks(0, 20), true)
	a.c.Send(2, jobs[1].blocks(0, 20), true)
	for _, j := range jobs {
		j.verify(t, a, b)
	}
	// Opened 3, 1, 2: job 3 and job 1 share the window, job 2 waits for one
	// of them to end before its first chunk lands.
	firstEnd, firstOf2 := -1, -1
	for i, e := range b.ev.all() {
		switch e := e.(type) {
		case RecvEnd:
			if firstEnd < 0 {
				firstEnd = i
				if e.Job == 2 {
					t.Fatalf("job 2, outside the window, ended first")
				}
			}
		case RecvProgress:
			if e.Job == 2 && !e.Queued && firstOf2 < 0 {
				firstOf2 = i
			}
		}
	}
	if firstOf2 < firstEnd {
		t.Fatalf("job 2's first chunk (event %d) landed before the first job ended (event %d)", firstOf2, firstEnd)
	}
}

// TestQueuedMeansWaitingForTurn checks the writer's Progress frames: a job
// with blocks outside the send window is Queued, a job open without blocks
// (its prefill not done) is not, nor is a job being sent.
func TestQueuedMeansWaitingForTurn(t *testing.T) {
	cfg, err := Config{BlockBytes: 4096, ChunkBytes: 1024, SendWindow: 1}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	w := newWriter(&Conn{cfg: cfg, mem: newArena(8, cfg.BlockBytes)})
	now := time.Unix(1000, 0)
	w.apply(&command{kind: cmdSend, job: 1, blocks: []Block{{Index: 0, Slot: 0}}, last: true}, now)
	w.apply(&command{kind: cmdSend, job: 2, blocks: []Block{{Index: 0, Slot: 1}}, last: true}, now)
	w.apply(&command{kind: cmdOpen, job: 3}, now)
	if j, p := w.nextChunk(); j == nil || j.id != 1 {
		t.Fatalf("first chunk from %v, want job 1", j)
	} else {
		w.out = w.out[:0]
		w.advance(j, len(p), now)
	}
	w.out = w.out[:0]
	w.appendProgress(now.Add(cfg.ProgressInterval))
	rd := wire.NewReader(bytes.NewReader(w.out), wire.DefaultLimits())
	got := map[uint64]bool{}
	for {
		m, err := rd.Next()
		if err != nil {
			break
		}
		if p, ok := m.(*wire.Progress); ok {
			got[p.Job] = p.Queued
		}
	}
	if q, ok := got[2]; !ok || !q {
		t.Errorf("job 2 (blocks, outside the window): progress %v queued %v, want queued", ok, q)
	}
	if q, ok := got[3]; !ok || q {
		t.Errorf("job 3 (no blocks yet): progress %v queued %v, want not queued", ok, q)
	}
	if got[1] {
		t.Error("job 1 (being sent) reported queued")
	}
}
