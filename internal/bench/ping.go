package bench

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// pingBytes is the raw ping-pong's message size: about a one-key Lookup
// frame, so that the ratio compares kvp2p's lookup with the bare round trip
// of the same loopback, one goroutine per side.
const pingBytes = 64

// rawPing is a plain TCP echo on 127.0.0.1: the floor under a lookup.
type rawPing struct {
	ln   net.Listener
	c    net.Conn
	buf  []byte
	done chan error
}

func newRawPing() (*rawPing, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &rawPing{ln: ln, buf: make([]byte, pingBytes), done: make(chan error, 1)}
	go p.echo()
	if p.c, err = net.Dial("tcp", ln.Addr().String()); err != nil {
		ln.Close()
		<-p.done
		return nil, err
	}
	return p, nil
}

// echo answers every message with itself until the connection ends.
func (p *rawPing) echo() {
	rc, err := p.ln.Accept()
	if err != nil {
		p.done <- err
		return
	}
	defer rc.Close()
	b := make([]byte, pingBytes)
	for {
		if _, err := io.ReadFull(rc, b); err != nil {
			p.done <- nil
			return
		}
		if _, err := rc.Write(b); err != nil {
			p.done <- err
			return
		}
	}
}

// rounds times n round trips, one at a time, in µs.
func (p *rawPing) rounds(n int) ([]float64, error) {
	out := make([]float64, 0, n)
	for i := range n {
		p.buf[0] = byte(i)
		t0 := time.Now()
		if _, err := p.c.Write(p.buf); err != nil {
			return nil, err
		}
		if _, err := io.ReadFull(p.c, p.buf); err != nil {
			return nil, err
		}
		out = append(out, float64(time.Since(t0).Nanoseconds())/1e3)
		if p.buf[0] != byte(i) {
			return nil, errors.New("raw ping: wrong echo")
		}
	}
	return out, nil
}

func (p *rawPing) close() error {
	p.c.Close()
	p.ln.Close()
	if err := <-p.done; err != nil {
		return fmt.Errorf("raw ping: %w", err)
	}
	return nil
}
