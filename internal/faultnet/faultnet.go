package faultnet

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvp2p/kvp2p/internal/wire"
)

// RankFault is the fault state of one rank, by its peer label.
type RankFault struct {
	Black, DataBlack, Stall, Refuse bool
	SlowBps                         int64
	Delay                           time.Duration
}

// Injector holds the fault state of every rank of one fleet and every
// connection any of its ranks accepted.
type Injector struct {
	// SendBuffer is each connection's send buffer while its rank is slow
	// (link.go; 0: DefaultSendBuffer). Set it before the first Wrap.
	SendBuffer int64

	mu     sync.Mutex
	faults map[string]*RankFault
	conns  map[*faultConn]struct{}
	change chan struct{}        // closed and replaced on every change of faults
	egress map[string]time.Time // a slow rank's link: when what it carries has left

	pauses  map[string]*dataPause    // PauseData, by rank (datafaults.go)
	corrupt map[string]chan struct{} // CorruptNextChunk, by rank
}

func NewInjector() *Injector {
	return &Injector{faults: map[string]*RankFault{}, conns: map[*faultConn]struct{}{}, change: make(chan struct{}),
		egress: map[string]time.Time{}}
}

// Set changes the fault state of a rank and wakes every held connection.
func (f *Injector) Set(label string, fn func(*RankFault)) {
	f.mu.Lock()
	rf := f.faults[label]
	if rf == nil {
		rf = &RankFault{}
		f.faults[label] = rf
	}
	wasStalled := rf.Stall
	fn(rf)
	if rf.SlowBps <= 0 {
		delete(f.egress, label) // the link is fast again: nothing waits on it
	}
	close(f.change)
	f.change = make(chan struct{})
	var later []*faultConn
	if wasStalled && !rf.Stall {
		for c := range f.conns {
			if c.local == label && c.closeLater {
				later = append(later, c)
			}
		}
	}
	f.mu.Unlock()
	for _, c := range later {
		c.closeNow()
	}
}

// Heal ends every fault of a rank.
func (f *Injector) Heal(label string) { f.Set(label, func(rf *RankFault) { *rf = RankFault{} }) }

// state returns, under f.mu, the faults of the connection's two ends.
func (f *Injector) state(c *faultConn) (l, r RankFault) {
	if p := f.faults[c.local]; p != nil {
		l = *p
	}
	if c.remote != "" {
		if p := f.faults[c.remote]; p != nil {
			r = *p
		}
	}
	return l, r
}

// of lists the connections the rank is an end of.
func (f *Injector) of(label string) []*faultConn {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*faultConn
	for c := range f.conns {
		if c.local == label || c.remote == label {
			out = append(out, c)
		}
	}
	return out
}

// Reset closes every connection of the rank once (close-control): both
// ends see the connection gone.
func (f *Injector) Reset(label string) {
	for _, c := range f.of(label) {
		c.closeNow()
	}
}

// Goodbye ends every session of the rank in order, as its idle eviction
// would (goodbye-idle): where the rank accepted the connection, a
// Goodbye(idle) is written to the peer at the next frame boundary and the
// connection closed; where the rank dialed it, the Goodbye is handed to
// the accepting node as if the rank had sent it. Data connections are
// closed a moment later, so that each peer reads the Goodbye first. The
// evicting rank's own node sees its connections reset rather than its own
// Goodbye: there is no API to make a Node evict its sessions. In the demo
// the evicting rank is a source, which never dials, so that only changes
// what the source's policy believes of the consumer.
func (f *Injector) Goodbye(label string) {
	var data []*faultConn
	for _, c := range f.of(label) {
		f.mu.Lock()
		isData := c.isData
		f.mu.Unlock()
		switch {
		case isData:
			data = append(data, c)
		case c.local == label:
			c.goodbyeOut()
		default:
			c.goodbyeIn.Store(true)
			c.closeNow()
		}
	}
	if len(data) > 0 {
		time.AfterFunc(50*time.Millisecond, func() {
			for _, c := range data {
				c.closeNow()
			}
		})
	}
}

// Listener wraps a rank's listener.
type Listener struct {
	net.Listener
	inj   *Injector
	label string
}

func NewListener(ln net.Listener, inj *Injector, label string) *Listener {
	return &Listener{Listener: ln, inj: inj, label: label}
}

func (l *Listener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.inj.Wrap(nc, l.label), nil
}

// Wrap makes nc, accepted by rank label, a faultConn. On a TLS fleet the
// node calls it after the handshake (Config.WrapAccepted), so that the
// frames it parses are plaintext.
func (f *Injector) Wrap(nc net.Conn, label string) net.Conn {
	c := &faultConn{Conn: nc, inj: f, local: label, closed: make(chan struct{})}
	c.rf.first, c.wf.first = true, true
	f.mu.Lock()
	f.conns[c] = struct{}{}
	f.mu.Unlock()
	return c
}

// faultConn is one accepted connection; see the file comment.
type faultConn struct {
	net.Conn
	inj        *Injector
	local      string
	remote     string // from the first frame; guarded by inj.mu
	isData     bool   // guarded by inj.mu
	closeLater bool   // closed while stalled; guarded by inj.mu

	// Read side: one reader at a time (the node's).
	rf    frameFilter
	rcut  map[uint64]bool
	rbuf  []byte // filtered bytes not yet returned
	rtmp  []byte
	rerr  error
	rnext time.Time // slow: when the next byte may be read

	// Write side.
	wmu       sync.Mutex
	q         outQueue // the send buffer while the rank is slow (link.go)
	wf        frameFilter
	wcut      map[uint64]bool
	byePend   bool // a Goodbye waits for a frame boundary
	goodbyeIn atomic.Bool
	flipAt    int64         // CorruptNextChunk: bytes to emit before the one to flip
	flipDone  chan struct{} // non-nil while a flip is armed

	rdl, wdl  atomic.Int64 // deadlines (unix ns; 0 none), for held calls
	window    atomic.Int64 // SetWriteProgress (ns; 0 off)
	closeOnce sync.Once
	closed    chan struct{}
}

func (c *faultConn) SetDeadline(t time.Time) error {
	c.rdl.Store(unixOrZero(t))
	c.wdl.Store(unixOrZero(t))
	return c.Conn.SetDeadline(t)
}

func (c *faultConn) SetReadDeadline(t time.Time) error {
	c.rdl.Store(unixOrZero(t))
	return c.Conn.SetReadDeadline(t)
}

func (c *faultConn) SetWriteDeadline(t time.Time) error {
	c.wdl.Store(unixOrZero(t))
	return c.Conn.SetWriteDeadline(t)
}

func unixOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// hold waits while an end of the connection is stalled. A stalled local
// process cannot notice time passing, so its deadlines are ignored; a
// stalled peer is waited for until the deadline.
func (c *faultConn) hold(deadline *atomic.Int64) error {
	for {
		c.inj.mu.Lock()
		l, r := c.inj.state(c)
		ch := c.inj.change
		c.inj.mu.Unlock()
		if !l.Stall && !r.Stall {
			return nil
		}
		var tc <-chan time.Time
		if !l.Stall {
			if d := deadline.Load(); d != 0 {
				t := time.NewTimer(time.Until(time.Unix(0, d)))
				defer t.Stop()
				tc = t.C
			}
		}
		select {
		case <-ch:
		case <-c.closed:
			return net.ErrClosed
		case <-tc:
			return os.ErrDeadlineExceeded
		}
	}
}

func (c *faultConn) Read(p []byte) (int, error) {
	for {
		if len(c.rbuf) > 0 {
			n := copy(p, c.rbuf)
			c.rbuf = c.rbuf[n:]
			return n, nil
		}
		if c.rerr != nil {
			return 0, c.rerr
		}
		if err := c.hold(&c.rdl); err != nil {
			return 0, err
		}
		if c.rtmp == nil {
			c.rtmp = make([]byte, 32<<10)
		}
		n, err := c.Conn.Read(c.rtmp)
		if n > 0 {
			c.pace(&c.rnext, n)
			c.rbuf = c.rbuf[:0]
			c.rf.process(c.rtmp[:n], func(b []byte) { c.rbuf = append(c.rbuf, b...) }, c.decideIn)
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && !errors.Is(err, net.ErrClosed) {
				if len(c.rbuf) > 0 {
					continue // deliver what arrived; the next read times out again
				}
				return 0, err
			}
			if c.goodbyeIn.Load() && c.rf.atBoundary() {
				if b, e := wire.Append(nil, &wire.Goodbye{Reason: wire.GoodbyeIdle, Detail: "demo: idle eviction"}); e == nil {
					c.rbuf = append(c.rbuf, b...)
				}
				err = io.EOF
			}
			c.rerr = err
		}
	}
}

func (c *faultConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.hold(&c.wdl); err != nil {
		return 0, err
	}
	if err := c.pauseData(len(p)); err != nil {
		return 0, err
	}
	c.inj.mu.Lock()
	l, r := c.inj.state(c)
	c.inj.mu.Unlock()
	if d := max(l.Delay, r.Delay); d > 0 {
		time.Sleep(d)
	}
	var bufs [][]byte
	c.wf.process(p, func(b []byte) { bufs = append(bufs, c.corruptOut(b)) }, c.decideOut)
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	if n > 0 {
		if err := c.writeOut(bufs); err != nil {
			return 0, err
		}
	}
	if c.byePend && c.wf.atBoundary() {
		c.byePend = false
		c.sayGoodbye()
	}
	return len(p), nil
}

// writeOut writes the kept bytes: through the connection's send buffer
// and the rank's link while its data path is slow, or while bytes it
// queued then are still waiting (link.go); straight to the socket
// otherwise.
func (c *faultConn) writeOut(bufs [][]byte) error {
	c.inj.mu.Lock()
	l, _ := c.inj.state(c)
	slow := c.isData && l.SlowBps > 0
	c.inj.mu.Unlock()
	if !slow && !c.queued() {
		nb := net.Buffers(bufs)
		_, err := nb.WriteTo(c.Conn)
		return err
	}
	return c.enqueue(bufs)
}

// pace sleeps so that bytes read from a connection the slow rank dialed
// stay under its rate. (Its writes go through link.go's send buffer.)
func (c *faultConn) pace(next *time.Time, n int) {
	c.inj.mu.Lock()
	_, r := c.inj.state(c)
	isData := c.isData
	c.inj.mu.Unlock()
	bps := r.SlowBps
	if !isData || bps <= 0 {
		return
	}
	now := time.Now()
	due := now
	if next.After(now) {
		due = *next
		time.Sleep(due.Sub(now))
	}
	*next = due.Add(time.Duration(float64(n) / float64(bps) * float64(time.Second)))
}

// goodbyeOut writes a Goodbye(idle) to the peer at the next frame
// boundary, then closes the connection.
func (c *faultConn) goodbyeOut() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.wf.atBoundary() {
		c.sayGoodbye()
		return
	}
	c.byePend = true
}

// sayGoodbye runs with wmu held.
func (c *faultConn) sayGoodbye() {
	if b, err := wire.Append(nil, &wire.Goodbye{Reason: wire.GoodbyeIdle, Detail: "demo: idle eviction"}); err == nil {
		_ = c.Conn.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = c.Conn.Write(b)
	}
	c.closeNow()
}

// dataJob reports whether a data-path frame type starts with a job id.
func dataJob(t wire.Type) bool {
	return t == wire.TypeChunk || t == wire.TypeProgress || t == wire.TypeDone || t == wire.TypeError
}

// decideIn decides an incoming frame from its head; the first frame names
// the remote end and the connection's kind.
func (c *faultConn) decideIn(head []byte, first bool) ([]byte, bool) {
	var hello *wire.Hello
	if first && len(head) >= 6 {
		m, err := wire.Decode(wire.Type(head[5]), head[6:], wire.DefaultLimits())
		if err == nil {
			c.inj.mu.Lock()
			switch m := m.(type) {
			case *wire.Hello:
				c.remote, hello = m.PeerID, m
			case *wire.DataAttach:
				c.remote, c.isData = m.PeerID, true
			}
			c.inj.mu.Unlock()
		}
	}
	if c.rcut == nil {
		c.rcut = map[uint64]bool{}
	}
	if first && c.isDataConn() && !c.fullBlack() {
		// A new data connection attaches even while the data path is a
		// blackhole: the simulator's sessions come up and their loads
		// vanish, they do not fail the handshake.
		return nil, false
	}
	repl, drop := c.decide(head, c.rcut)
	if drop || hello == nil {
		return repl, drop
	}
	return c.refuseHello(head), false
}

func (c *faultConn) decideOut(head []byte, first bool) ([]byte, bool) {
	if c.wcut == nil {
		c.wcut = map[uint64]bool{}
	}
	repl, drop := c.decide(head, c.wcut)
	if !drop {
		c.armCorrupt(head)
	}
	if drop || !first || len(head) < 6 || wire.Type(head[5]) != wire.TypeHello {
		return repl, drop
	}
	return c.refuseHello(head), false
}

// refuseHello spoils a Hello's hash seed while either end refuses
// handshakes, so that the node receiving it refuses it as incompatible, as
// the simulator does; nil leaves the frame as it is.
func (c *faultConn) refuseHello(head []byte) []byte {
	c.inj.mu.Lock()
	l, r := c.inj.state(c)
	c.inj.mu.Unlock()
	if !l.Refuse && !r.Refuse {
		return nil
	}
	m, err := wire.Decode(wire.TypeHello, head[6:], wire.DefaultLimits())
	if err != nil {
		return nil
	}
	h := m.(*wire.Hello)
	h.HashSeed += "\x00refused"
	b, err := wire.Append(nil, h)
	if err != nil {
		return nil
	}
	return b
}

func (c *faultConn) isDataConn() bool {
	c.inj.mu.Lock()
	defer c.inj.mu.Unlock()
	return c.isData
}

func (c *faultConn) fullBlack() bool {
	c.inj.mu.Lock()
	defer c.inj.mu.Unlock()
	l, r := c.inj.state(c)
	return l.Black || r.Black
}

// decide drops a frame while a blackhole covers it, and every later frame
// of a job whose stream it cut.
func (c *faultConn) decide(head []byte, cut map[uint64]bool) ([]byte, bool) {
	c.inj.mu.Lock()
	l, r := c.inj.state(c)
	isData := c.isData
	c.inj.mu.Unlock()
	black := l.Black || r.Black || (isData && (l.DataBlack || r.DataBlack))
	if isData && len(head) >= 14 && dataJob(wire.Type(head[5])) {
		job := binary.BigEndian.Uint64(head[6:14])
		if black {
			cut[job] = true
			return nil, true
		}
		return nil, cut[job]
	}
	return nil, black
}

// Close closes the connection, unless its rank is stalled: a paused
// process closes nothing; the close happens when it resumes.
func (c *faultConn) Close() error {
	c.inj.mu.Lock()
	if p := c.inj.faults[c.local]; p != nil && p.Stall {
		c.closeLater = true
		c.inj.mu.Unlock()
		return nil
	}
	c.inj.mu.Unlock()
	return c.closeNow()
}

func (c *faultConn) closeNow() error {
	c.closeOnce.Do(func() {
		c.inj.mu.Lock()
		delete(c.inj.conns, c)
		c.inj.mu.Unlock()
		close(c.closed)
	})
	return c.Conn.Close()
}

// frameFilter follows the wire's frames through one direction of a
// stream and lets a decision function keep, replace or drop each whole
// frame (a Chunk with its payload). It decides on the frame's head: the
// first frame whole, then at most the chunk header's length.
type frameFilter struct {
	head  []byte
	rest  int64 // bytes of the current frame (and payload) after its head
	drop  bool
	first bool // the next frame is the connection's first
}

const maxFirstFrame = 1 << 20

func (f *frameFilter) atBoundary() bool { return f.rest == 0 && len(f.head) == 0 }

// process feeds p through; emit receives the bytes to pass on (slices of
// p or of the filter's buffers, valid until the next call).
func (f *frameFilter) process(p []byte, emit func([]byte), decide func(head []byte, first bool) ([]byte, bool)) {
	for len(p) > 0 {
		if f.rest > 0 {
			n := int(min(int64(len(p)), f.rest))
			if !f.drop {
				emit(p[:n])
			}
			p, f.rest = p[n:], f.rest-int64(n)
			continue
		}
		if len(f.head) < 4 {
			k := min(4-len(f.head), len(p))
			f.head, p = append(f.head, p[:k]...), p[k:]
			if len(f.head) < 4 {
				continue
			}
		}
		total := int64(binary.BigEndian.Uint32(f.head)) + 4
		want := min(total, wire.ChunkHeaderLen)
		if f.first && total <= maxFirstFrame {
			want = total
		}
		if k := int(want) - len(f.head); k > 0 {
			k = min(k, len(p))
			f.head, p = append(f.head, p[:k]...), p[k:]
			if int64(len(f.head)) < want {
				continue
			}
		}
		f.rest = total - int64(len(f.head))
		if len(f.head) >= wire.ChunkHeaderLen && wire.Type(f.head[5]) == wire.TypeChunk {
			f.rest += int64(binary.BigEndian.Uint32(f.head[6+16:]))
		}
		repl, drop := decide(f.head, f.first)
		f.first, f.drop = false, drop
		if !drop {
			if repl == nil {
				repl = append([]byte(nil), f.head...)
			}
			emit(repl)
		}
		f.head = f.head[:0]
	}
}
