package faultnet

import (
	"net"
	"os"
	"sync"
	"time"
)

// A slow rank's outgoing data, as a real network carries it (issue 8): its
// data connections share one link of SlowBps (the rank's egress clock,
// Injector.egress), taking it in turn a piece at a time as a kernel
// interleaves flows (issue 24), and each connection has a send buffer of
// SendBuffer bytes in front of it, as the kernel's. A write is accepted at once while
// the connection's buffer has room (the node's writer goes on), and blocks
// while it is full, until its write deadline; its bytes reach the real
// socket when the link has carried them. So a small frame the node writes
// behind block bytes already accepted (a ProbeAck, a Probe, a Progress)
// waits for them, up to a buffer's worth: a slow but healthy rank answers
// a probe late, as the simulator's bandwidth model has it (internal/sim's
// link.go); a frame on another connection of the rank waits for the
// pieces already on the link, not for this connection's whole buffer. Pacing before the kernel instead, as this injector did, let
// such a frame leave after at most the chunk before it.
//
// Bytes are delivered in pieces of slowPiece, each when the link has
// carried it, so a reader sees a chunk arrive gradually. When the rank's
// slow fault ends what is queued goes out at once. Closing the connection
// drops what is queued, as the simulator's close and crash do (nothing a
// node had queued is delivered after it closed or crashed); the demo heals
// a rank before it crashes it, so its queue is flushed first where it can.
// Frames are filtered (blackholes) when written, not when delivered.

// DefaultSendBuffer is a connection's send buffer while its rank is slow:
// Linux's largest autotuned TCP send buffer (tcp_wmem), and the
// simulator's SendBuffer.
const DefaultSendBuffer = 4 << 20

const slowPiece = 16 << 10

// outQueue is a connection's send buffer while its rank is slow.
type outQueue struct {
	mu      sync.Mutex
	items   []outItem
	bytes   int64
	pumping bool          // a pump goroutine is delivering
	space   chan struct{} // closed and replaced when bytes leave
	free    [][]byte      // delivered pieces, for reuse
}

type outItem struct {
	b   []byte
	due time.Time // when the link has carried it
}

// sendBuffer is the fabric's send buffer size.
func (f *Injector) sendBuffer() int64 {
	if f.SendBuffer > 0 {
		return f.SendBuffer
	}
	return DefaultSendBuffer
}

// carry books n bytes on the rank's link and returns when they have left
// it: after everything booked before, at bps.
func (f *Injector) carry(label string, n int, bps int64) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	start := f.egress[label]
	if start.Before(now) {
		start = now
	}
	due := start.Add(time.Duration(float64(n) / float64(bps) * float64(time.Second)))
	f.egress[label] = due
	return due
}

// queued reports whether bytes wait in the connection's send buffer.
func (c *faultConn) queued() bool {
	c.q.mu.Lock()
	defer c.q.mu.Unlock()
	return len(c.q.items) > 0
}

// enqueue puts bufs in the send buffer, piece by piece (the pump books
// each on the rank's link when its turn comes), waiting for room while the
// buffer is full. It runs with wmu held.
func (c *faultConn) enqueue(bufs [][]byte) error {
	limit := c.inj.sendBuffer()
	for _, b := range bufs {
		for len(b) > 0 {
			k := min(len(b), slowPiece)
			if err := c.waitRoom(int64(k), limit); err != nil {
				return err
			}
			c.q.mu.Lock()
			var piece []byte
			if n := len(c.q.free); n > 0 {
				piece, c.q.free = c.q.free[n-1][:0], c.q.free[:n-1]
			}
			c.q.items = append(c.q.items, outItem{b: append(piece, b[:k]...)})
			c.q.bytes += int64(k)
			if !c.q.pumping {
				c.q.pumping = true
				go c.pump()
			}
			c.q.mu.Unlock()
			b = b[k:]
		}
	}
	return nil
}

// waitRoom blocks until n more bytes fit in the send buffer (an empty
// buffer takes anything), the connection closes, or the write deadline
// passes.
func (c *faultConn) waitRoom(n, limit int64) error {
	for {
		c.q.mu.Lock()
		if c.q.bytes == 0 || c.q.bytes+n <= limit {
			c.q.mu.Unlock()
			return nil
		}
		if c.q.space == nil {
			c.q.space = make(chan struct{})
		}
		space := c.q.space
		c.q.mu.Unlock()
		var tc <-chan time.Time
		var timer *time.Timer
		if d := c.wdl.Load(); d != 0 {
			timer = time.NewTimer(time.Until(time.Unix(0, d)))
			tc = timer.C
		}
		select {
		case <-space:
			// The link drained some: with a progress window
			// (SetWriteProgress) the deadline bounds a wait with no
			// progress, as the data path's writer does on a real socket.
			// The pump writes the socket under the same deadline.
			if w := c.window.Load(); w > 0 {
				d := time.Now().Add(time.Duration(w))
				c.wdl.Store(d.UnixNano())
				_ = c.Conn.SetWriteDeadline(d)
			}
		case <-c.closed:
			return net.ErrClosed
		case <-tc:
			return os.ErrDeadlineExceeded
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// SetWriteProgress (datapath.ProgressWriter): from now on a write waiting
// for room in the slow link's send buffer gets window more each time the
// buffer drains some, so that only a wait with no progress for window
// meets the deadline. A write still reports 0 bytes on a deadline, so the
// data path cannot go on with it itself.
func (c *faultConn) SetWriteProgress(window time.Duration) { c.window.Store(int64(window)) }

// pump delivers the send buffer to the socket, each piece when it is due
// (at once once the rank is no longer slow), and exits when the buffer is
// empty or the connection closed.
func (c *faultConn) pump() {
	for {
		c.q.mu.Lock()
		if len(c.q.items) == 0 {
			c.q.pumping = false
			c.q.mu.Unlock()
			return
		}
		it := c.q.items[0]
		c.q.mu.Unlock()

		c.inj.mu.Lock()
		l, _ := c.inj.state(c)
		change := c.inj.change
		c.inj.mu.Unlock()
		if l.SlowBps > 0 && it.due.IsZero() {
			// Booked on the rank's link when it is this connection's turn
			// to send, not when the node wrote it: the rank's connections
			// take the link in turn, a piece each, as a kernel interleaves
			// flows, rather than one connection's whole send buffer before
			// another's first byte (issue 24).
			it.due = c.inj.carry(c.local, len(it.b), l.SlowBps)
			c.q.mu.Lock()
			if len(c.q.items) > 0 {
				c.q.items[0].due = it.due
			}
			c.q.mu.Unlock()
		}
		if wait := time.Until(it.due); l.SlowBps > 0 && wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-change: // the rank's faults changed: look again
				t.Stop()
				continue
			case <-c.closed:
				t.Stop()
				c.drop()
				return
			}
		}
		_, err := c.Conn.Write(it.b)

		c.q.mu.Lock()
		c.q.items = c.q.items[1:]
		c.q.bytes -= int64(len(it.b))
		c.q.free = append(c.q.free, it.b)
		if c.q.space != nil {
			close(c.q.space)
			c.q.space = nil
		}
		c.q.mu.Unlock()
		if err != nil {
			c.closeNow()
			c.drop()
			return
		}
	}
}

// drop forgets what is queued (the socket is gone) and ends the pump.
func (c *faultConn) drop() {
	c.q.mu.Lock()
	defer c.q.mu.Unlock()
	c.q.items, c.q.bytes, c.q.pumping = nil, 0, false
	if c.q.space != nil {
		close(c.q.space)
		c.q.space = nil
	}
}
