package kvp2p

import (
	"net"
	"sync"

	"github.com/kvp2p/kvp2p/internal/wire"
)

// testListener wraps a node's listener so a test can act on the data
// connections it accepts (a producer's data connections are accepted: the
// consumer dials). It tells data from control by the first frame's type
// byte, as internal/faultnet does, and can:
//
//   - pause: let the next n bytes written on data connections through, then
//     block every data write until resume or the connection's Close;
//   - flip: corrupt one payload byte of the next chunk written (a copy:
//     the source slot is never touched);
//   - blackhole: writes vanish, what arrives is dropped, control lives on.
type testListener struct {
	net.Listener
	chunkBytes int // payload size of a chunk: a data write of this length is a payload

	mu        sync.Mutex
	conns     map[*testConn]struct{}
	black     bool
	pauseLeft int64         // bytes still allowed through before the pause; <0: no pause
	paused    chan struct{} // closed when a write first blocks on the pause
	resumed   chan struct{} // closed by resume
	flip      bool          // corrupt the next chunk payload
	flipped   chan struct{} // closed once a byte was flipped
}

func newTestListener(ln net.Listener, chunkBytes int) *testListener {
	return &testListener{
		Listener: ln, chunkBytes: chunkBytes, conns: map[*testConn]struct{}{},
		pauseLeft: -1, resumed: make(chan struct{}), paused: make(chan struct{}),
		flipped: make(chan struct{}),
	}
}

func (l *testListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := &testConn{Conn: nc, l: l, closed: make(chan struct{})}
	l.mu.Lock()
	l.conns[c] = struct{}{}
	l.mu.Unlock()
	return c, nil
}

// pauseAfter arms the pause: n more bytes of data writes pass, then writes
// block. The returned channel is closed when a write blocks.
func (l *testListener) pauseAfter(n int64) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pauseLeft = n
	l.paused = make(chan struct{})
	l.resumed = make(chan struct{})
	return l.paused
}

// resume lets blocked and later data writes through.
func (l *testListener) resume() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pauseLeft = -1
	select {
	case <-l.resumed:
	default:
		close(l.resumed)
	}
}

// flipNext corrupts one byte of the next chunk payload; the returned channel
// is closed when it happened.
func (l *testListener) flipNext() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flip = true
	l.flipped = make(chan struct{})
	return l.flipped
}

func (l *testListener) blackhole(on bool) {
	l.mu.Lock()
	l.black = on
	l.mu.Unlock()
}

// testConn learns from its first frame whether it is a data connection.
type testConn struct {
	net.Conn
	l         *testListener
	sniffed   int  // bytes of the first frame header seen (read goroutine only)
	data      bool // set once, by the read goroutine, before any data write
	dataMu    sync.Mutex
	closeOnce sync.Once
	closed    chan struct{}
}

func (c *testConn) isDataConn() bool {
	c.dataMu.Lock()
	defer c.dataMu.Unlock()
	return c.data
}

func (c *testConn) black() bool {
	if !c.isDataConn() {
		return false
	}
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	return c.l.black
}

func (c *testConn) Read(p []byte) (int, error) {
	for {
		n, err := c.Conn.Read(p)
		first := c.sniffed < 6
		for i := 0; i < n && c.sniffed < 6; i++ {
			if c.sniffed == 5 && wire.Type(p[i]) == wire.TypeDataAttach {
				c.dataMu.Lock()
				c.data = true
				c.dataMu.Unlock()
			}
			c.sniffed++
		}
		if err != nil || first || !c.black() {
			return n, err
		}
		// Blackholed: what arrived is dropped, the reader keeps waiting.
	}
}

func (c *testConn) Write(p []byte) (int, error) {
	if !c.isDataConn() {
		return c.Conn.Write(p)
	}
	l := c.l
	l.mu.Lock()
	if l.black {
		l.mu.Unlock()
		return len(p), nil
	}
	if l.flip && len(p) == l.chunkBytes {
		l.flip = false
		q := append([]byte(nil), p...)
		q[len(q)/2] ^= 0x5a
		close(l.flipped)
		l.mu.Unlock()
		n, err := c.Conn.Write(q)
		return n, err
	}
	for l.pauseLeft >= 0 && l.pauseLeft < int64(len(p)) {
		select {
		case <-l.paused:
		default:
			close(l.paused)
		}
		resumed := l.resumed
		l.mu.Unlock()
		select {
		case <-resumed:
		case <-c.closed:
			return 0, net.ErrClosed
		}
		l.mu.Lock()
	}
	if l.pauseLeft >= 0 {
		l.pauseLeft -= int64(len(p))
	}
	l.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *testConn) Close() error {
	c.closeOnce.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
		close(c.closed)
	})
	return c.Conn.Close()
}
