package datapath

import (
	"bytes"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// guard is the fence around every slot of a test arena: 0xA5 bytes that no
// write may touch.
const guard = 64

// arena is a Memory whose slots are fenced by guard bytes, so a write
// outside a slot is caught by checkGuards.
type arena struct {
	bb, n int
	buf   []byte
}

func newArena(n, bb int) *arena {
	a := &arena{bb: bb, n: n, buf: make([]byte, guard+n*(bb+guard))}
	for i := range a.buf {
		a.buf[i] = 0xA5
	}
	for i := range n {
		clear(a.Slot(uint32(i)))
	}
	return a
}

// Slot returns slot i with its capacity capped, or nil out of range.
func (a *arena) Slot(i uint32) []byte {
	if int64(i) >= int64(a.n) {
		return nil
	}
	off := guard + int(i)*(a.bb+guard)
	return a.buf[off : off+a.bb : off+a.bb]
}

func (a *arena) checkGuards(t testing.TB) {
	t.Helper()
	for i := 0; i <= a.n; i++ {
		off := i * (a.bb + guard)
		for k, b := range a.buf[off : off+guard] {
			if b != 0xA5 {
				t.Fatalf("guard before slot %d byte %d overwritten: %#x", i, k, b)
			}
		}
	}
}

// pattern fills p with bytes that depend on (job, block).
func pattern(p []byte, job uint64, block uint32) {
	x := job*0x9E3779B97F4A7C15 + uint64(block)*0xBF58476D1CE4E5B9 + 1
	for i := range p {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		p[i] = byte(x)
	}
}

func wantPattern(t testing.TB, got []byte, job uint64, block uint32) {
	t.Helper()
	want := make([]byte, len(got))
	pattern(want, job, block)
	if !bytes.Equal(got, want) {
		t.Fatalf("job %d block %d: destination bytes differ from the source", job, block)
	}
}

// sink records events without ever blocking the emitter.
type sink struct {
	mu     sync.Mutex
	evs    []Event
	notify chan struct{} // cap 1
	pos    int           // owned by the test goroutine: events before it were seen
}

func newSink() *sink { return &sink{notify: make(chan struct{}, 1)} }

func (s *sink) emit(e Event) {
	s.mu.Lock()
	s.evs = append(s.evs, e)
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func (s *sink) all() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Event(nil), s.evs...)
}

// waitFor returns the first event after the last one returned that matches
// pred. It fails the test after 20 s (virtual time inside a synctest
// bubble).
func (s *sink) waitFor(t testing.TB, what string, pred func(Event) bool) Event {
	t.Helper()
	timeout := time.NewTimer(20 * time.Second)
	defer timeout.Stop()
	for {
		s.mu.Lock()
		for ; s.pos < len(s.evs); s.pos++ {
			if e := s.evs[s.pos]; pred(e) {
				s.pos++
				s.mu.Unlock()
				return e
			}
		}
		s.mu.Unlock()
		select {
		case <-s.notify:
		case <-timeout.C:
			t.Fatalf("timed out waiting for %s; events: %v", what, s.all())
		}
	}
}

// recvEnd and sendEnd look from the first event: a job's end is unique.
func (s *sink) recvEnd(t testing.TB, job uint64) RecvEnd {
	t.Helper()
	s.pos = 0
	return s.waitFor(t, "RecvEnd", func(e Event) bool { x, ok := e.(RecvEnd); return ok && x.Job == job }).(RecvEnd)
}

func (s *sink) sendEnd(t testing.TB, job uint64) SendEnd {
	t.Helper()
	s.pos = 0
	return s.waitFor(t, "SendEnd", func(e Event) bool { x, ok := e.(SendEnd); return ok && x.Job == job }).(SendEnd)
}

func (s *sink) closed(t testing.TB) Closed {
	t.Helper()
	return s.waitFor(t, "Closed", func(e Event) bool { _, ok := e.(Closed); return ok }).(Closed)
}

// peer is one end of a test connection: a Conn, its arena and its events.
type peer struct {
	c   *Conn
	mem *arena
	ev  *sink
}

func startPeer(t testing.TB, nc net.Conn, cfg Config, slots int) *peer {
	t.Helper()
	return startPeerOn(t, nc, cfg, slots, nil)
}

// startPeerOn is startPeer with the Conn's Memory made from the peer's
// arena by wrap (nil: the arena itself).
func startPeerOn(t testing.TB, nc net.Conn, cfg Config, slots int, wrap func(*arena) Memory) *peer {
	t.Helper()
	p := &peer{mem: newArena(slots, cfg.BlockBytes), ev: newSink()}
	var mem Memory = p.mem
	if wrap != nil {
		mem = wrap(p.mem)
	}
	c, err := Start(nc, cfg, mem, p.ev.emit)
	if err != nil {
		t.Fatal(err)
	}
	p.c = c
	return p
}

// stop closes the Conn, waits for Closed and checks that it was the last
// event and the only one, and that no slot fence was touched.
func (p *peer) stop(t testing.TB) {
	t.Helper()
	p.c.Close()
	<-p.c.Done()
	evs := p.ev.all()
	n := 0
	for i, e := range evs {
		if _, ok := e.(Closed); ok {
			n++
			if i != len(evs)-1 {
				t.Errorf("Closed is event %d of %d, want last", i, len(evs))
			}
		}
	}
	if n != 1 {
		t.Errorf("%d Closed events, want 1", n)
	}
	p.mem.checkGuards(t)
}

func tcpPair(t testing.TB) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			c = nil
		}
		accepted <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-accepted
	if b == nil {
		t.Fatal("accept failed")
	}
	return a, b
}

// pairs gives the connection kinds tests run over.
var pairs = []struct {
	name string
	make func(testing.TB) (net.Conn, net.Conn)
}{
	{"pipe", func(testing.TB) (net.Conn, net.Conn) { return net.Pipe() }},
	{"tcp", tcpPair},
}
