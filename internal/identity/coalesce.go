package identity

import (
	"crypto/tls"
	"net"
	"sync"
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
	return c.Conn.Write(p)
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
	_, err := c.Conn.Write(c.buf)
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
