package identity

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// coalesceMax bounds the ciphertext a Coalescer holds before it writes:
// one default 256 KiB chunk in 16 KiB records plus their headers and tags.
const coalesceMax = 272 << 10

// Coalescer sits between a tls.Conn and its socket. crypto/tls writes one
// record (at most 16 KiB) per call to the socket; held, the Coalescer
// gathers those records so one tls.Conn.Write of a 256 KiB chunk costs one
// write system call instead of seventeen (the profile of a TLS load showed
// the socket writes at 2.6x plain TCP's CPU for the same bytes). Not held,
// it writes through: the handshake and crypto/tls's own messages from the
// reading goroutine (key update answers, alerts) are never delayed.
type Coalescer struct {
	net.Conn
	mu   sync.Mutex // tls.Conn serializes its writes; this guards held/buf against hold/flush
	held bool
	buf  []byte // grows to at most coalesceMax, once per connection

	// window is SetWriteProgress's (a time.Duration; 0: off). Atomic:
	// crypto/tls writes from its reading goroutine too.
	window atomic.Int64
}

func (c *Coalescer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held && len(c.buf)+len(p) > coalesceMax {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
	}
	if c.held && len(p) <= coalesceMax {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	if err := c.flushLocked(); err != nil {
		return 0, err
	}
	return c.write(p)
}

// write writes p to the socket. With a progress window set, a write that
// meets its deadline having moved bytes goes on with the rest under a
// fresh deadline one window later: crypto/tls above never sees that
// timeout, which would break the connection for good, and a write fails
// only when the socket took nothing for a whole window (SetWriteProgress).
func (c *Coalescer) write(p []byte) (int, error) {
	n := 0
	for {
		k, err := c.Conn.Write(p[n:])
		n += k
		w := time.Duration(c.window.Load())
		if err == nil || k == 0 || w <= 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			return n, err
		}
		if err := c.Conn.SetWriteDeadline(time.Now().Add(w)); err != nil {
			return n, err
		}
	}
}

func (c *Coalescer) hold() {
	c.mu.Lock()
	c.held = true
	c.mu.Unlock()
}

// release stops holding and writes what was held.
func (c *Coalescer) release() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held = false
	return c.flushLocked()
}

func (c *Coalescer) flushLocked() error {
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.write(c.buf)
	c.buf = c.buf[:0]
	return err
}

// CoalescedTLS is a *tls.Conn over a Coalescer: each Write's records reach
// the socket in one write. A Write that fails to flush reports the error
// (the bytes may be partly sent, as with any failed socket write; the
// connection is then dead anyway).
type CoalescedTLS struct {
	*tls.Conn
	Co *Coalescer
}

func (c *CoalescedTLS) Write(p []byte) (int, error) {
	c.Co.hold()
	n, err := c.Conn.Write(p)
	if ferr := c.Co.release(); err == nil && ferr != nil {
		return 0, ferr
	}
	return n, err
}

// NetConn is the socket, for socket options (datapath sets
// TCP_USER_TIMEOUT through it).
func (c *CoalescedTLS) NetConn() net.Conn { return c.Co.Conn }

// SetWriteProgress makes a write deadline bound the socket's silence
// instead of a write's length (the data path's WriteTimeout, issue 24:
// slow is not dead): a socket write that meets its deadline after moving
// bytes goes on under a fresh deadline window later, below TLS, so a write
// fails only when the socket accepted nothing for window (detected one to
// two windows after its last byte). 0 turns it off: any timeout then
// fails the write, and crypto/tls's state is corrupt after it. The caller
// must own the connection's write deadlines: one set in the past to
// interrupt a write would be renewed while bytes move (Close interrupts a
// write in any case).
func (c *CoalescedTLS) SetWriteProgress(window time.Duration) {
	c.Co.window.Store(int64(max(window, 0)))
}

// WriteBuffers writes bufs in order as one unit: their records reach the
// socket in one write where they fit in coalesceMax. The data path's
// writer uses it for a chunk header and its payload (datapath.BuffersWriter),
// which would otherwise be two socket writes, and two wake-ups of the
// reader, per chunk.
func (c *CoalescedTLS) WriteBuffers(bufs [][]byte) (int64, error) {
	c.Co.hold()
	var n int64
	var err error
	for _, b := range bufs {
		var k int
		k, err = c.Conn.Write(b)
		n += int64(k)
		if err != nil {
			break
		}
	}
	if ferr := c.Co.release(); err == nil && ferr != nil {
		return 0, ferr
	}
	return n, err
}
