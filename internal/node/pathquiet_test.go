//go:build linux

package node

import (
	"crypto/tls"
	"net"
	"testing"
	"time"
)

// The kernel's view of a data path: a loopback TCP connection, plain or
// under the wrappers a TLS session puts on it, gives TCP's retransmission
// timeout plus its round trip (Linux's smallest retransmission timeout is
// 200 ms; a loopback round trip is microseconds), well under the
// watchdog's 1 s, so that on a fast path checkPaths changes nothing.
func TestTCPQuietLoopback(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(acc)
			return
		}
		acc <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	peer, ok := <-acc
	if !ok {
		t.Fatal("accept failed")
	}
	defer peer.Close()
	if _, err := c.Write([]byte("x")); err != nil { // one round trip measured
		t.Fatal(err)
	}
	for name, nc := range map[string]net.Conn{"plain": c, "tls": tls.Client(c, &tls.Config{})} {
		d, ok := tcpQuiet(nc)
		if !ok || d < 200*time.Millisecond || d >= time.Second {
			t.Errorf("%s: tcpQuiet %v, %v: want a retransmission timeout of at least 200 ms and under 1 s", name, d, ok)
		}
	}
	if _, ok := tcpQuiet(pipeConn{}); ok {
		t.Error("a connection with no socket under it gave a figure")
	}
}

type pipeConn struct{ net.Conn }
