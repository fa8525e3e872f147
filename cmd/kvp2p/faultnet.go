package main

import (
	"net"
	"sync"
)

// faultListener wraps a node's listener so the demo can inject faults on
// real sockets: reset every connection, or make the data connections
// silent (bytes written vanish, nothing is read) while control lives on.
type faultListener struct {
	net.Listener
	mu        sync.Mutex
	conns     map[*faultConn]struct{}
	dataBlack bool
}

func newFaultListener(ln net.Listener) *faultListener {
	return &faultListener{Listener: ln, conns: map[*faultConn]struct{}{}}
}

func (l *faultListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := &faultConn{Conn: nc, l: l, closed: make(chan struct{})}
	l.mu.Lock()
	l.conns[c] = struct{}{}
	l.mu.Unlock()
	return c, nil
}

// resetAll closes every accepted connection (the peers see EOF/RST).
func (l *faultListener) resetAll() {
	l.mu.Lock()
	cs := make([]*faultConn, 0, len(l.conns))
	for c := range l.conns {
		cs = append(cs, c)
	}
	l.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

// blackholeData makes every data connection, current and future, silent.
func (l *faultListener) blackholeData(on bool) {
	l.mu.Lock()
	l.dataBlack = on
	l.mu.Unlock()
}

// faultConn learns from its first frame whether it is a data connection
// (wire type DataAttach, byte 5 of the frame) and drops its traffic while
// the listener's data path is blackholed.
type faultConn struct {
	net.Conn
	l         *faultListener
	sniffed   int
	isData    bool
	closeOnce sync.Once
	closed    chan struct{}
}

const wireTypeDataAttach = 12

func (c *faultConn) black() bool {
	if !c.isData {
		return false
	}
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	return c.l.dataBlack
}

func (c *faultConn) Read(p []byte) (int, error) {
	for {
		n, err := c.Conn.Read(p)
		first := c.sniffed < 6
		if first {
			for i := 0; i < n && c.sniffed < 6; i++ {
				if c.sniffed == 5 {
					c.isData = p[i] == wireTypeDataAttach
				}
				c.sniffed++
			}
		}
		if err != nil || first || !c.black() {
			return n, err
		}
		// Blackholed: what arrived is dropped, the reader keeps waiting.
	}
}

func (c *faultConn) Write(p []byte) (int, error) {
	if c.black() {
		return len(p), nil // vanishes on the wire
	}
	return c.Conn.Write(p)
}

func (c *faultConn) Close() error {
	c.closeOnce.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
		close(c.closed)
	})
	return c.Conn.Close()
}
