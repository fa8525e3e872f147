package identity

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// slowConn lets through at most step bytes per Read, one Read per tick,
// until stop: the reading end of a slow link. The tests run it in a
// synctest bubble, so the ticker and the write deadlines share one fake
// clock: the reader's rate is exact and a busy machine cannot starve it
// for a window (before, a reader descheduled for 150 ms of wall time made
// a "slow but moving" write time out).
type slowConn struct {
	net.Conn
	step int
	tick *time.Ticker
	stop chan struct{} // closed: reads block until Close
	done chan struct{}
	once sync.Once
}

func (s *slowConn) Read(p []byte) (int, error) {
	select {
	case <-s.tick.C:
	case <-s.done:
		return 0, net.ErrClosed
	}
	select {
	case <-s.stop: // stopped reading: nothing more until Close
		<-s.done
		return 0, net.ErrClosed
	default:
	}
	return s.Conn.Read(p[:min(len(p), s.step)])
}

func (s *slowConn) Close() error {
	s.once.Do(func() { s.tick.Stop(); close(s.done) })
	return s.Conn.Close()
}

// slowTLS is a CoalescedTLS client over net.Pipe whose server reads
// through a slowConn (4 KiB every 2 ms: about 2 MB/s), after the
// handshake. The server reads into got until the pipe closes. Build it
// in a synctest bubble.
type slowTLS struct {
	ct   *CoalescedTLS
	slow *slowConn
	got  bytes.Buffer
	wg   sync.WaitGroup
}

func newSlowTLS(t *testing.T) *slowTLS {
	sc, cc := rankCreds(t)
	a, b := net.Pipe()
	s := &slowTLS{slow: &slowConn{Conn: b, step: 4 << 10, tick: time.NewTicker(2 * time.Millisecond),
		stop: make(chan struct{}), done: make(chan struct{})}}
	co := &Coalescer{Conn: a}
	client := tls.Client(co, cc.ClientConfig("127.0.0.1:1"))
	server := tls.Server(s.slow, sc.ServerConfig())
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if server.Handshake() == nil {
			io.Copy(&s.got, server)
		}
	}()
	if err := client.Handshake(); err != nil {
		t.Fatal(err)
	}
	s.ct = &CoalescedTLS{Conn: client, Co: co}
	t.Cleanup(func() {
		// Closing the pipe, not the TLS ends (see
		// TestCoalescedTLSOneWritePerCall).
		a.Close()
		s.slow.Close()
		s.wg.Wait()
	})
	return s
}

// write writes n bytes with a deadline one window away, as the data
// path's writer does.
func (s *slowTLS) write(n int, window time.Duration) error {
	s.ct.SetWriteDeadline(time.Now().Add(window))
	_, err := s.ct.Write(bytes.Repeat([]byte{'x'}, n))
	return err
}

// TestCoalescedTLSSlowReader (issue 24, slow is not dead): with a progress
// window, a 1 MiB Write that a slow reader drains in several windows
// succeeds, and the connection stays usable; without one the same Write
// times out (and crypto/tls's state is then corrupt for good), which is
// also the proof that the reader is slow enough for the case.
func TestCoalescedTLSSlowReader(t *testing.T) {
	const window = 150 * time.Millisecond
	t.Run("progress", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newSlowTLS(t)
			s.ct.SetWriteProgress(window)
			start := time.Now()
			if err := s.write(1<<20, window); err != nil {
				t.Fatalf("slow but moving: %v after %v", err, time.Since(start))
			}
			took := time.Since(start)
			if took <= window {
				t.Fatalf("1 MiB in %v: the reader is not slower than one window (%v), the case is not tested", took, window)
			}
			if err := s.write(100, window); err != nil {
				t.Fatalf("next write: %v", err)
			}
			t.Logf("1 MiB in %v of the bubble's time (window %v)", took, window)
		})
	})
	t.Run("per-write deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newSlowTLS(t)
			err := s.write(1<<20, window)
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("without a progress window: %v, want a deadline error", err)
			}
		})
	})
}

// TestCoalescedTLSStalledReader: with a progress window, a reader that
// stops reading still fails the write, with a deadline error, within two
// windows of its last read (the window running when it stopped, and the
// next, which moves nothing).
func TestCoalescedTLSStalledReader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window = 150 * time.Millisecond
		s := newSlowTLS(t)
		s.ct.SetWriteProgress(window)
		stopped := make(chan time.Time, 1)
		time.AfterFunc(100*time.Millisecond, func() {
			stopped <- time.Now()
			close(s.slow.stop)
		})
		err := s.write(1<<20, window)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("stalled reader: %v, want a deadline error", err)
		}
		if took := time.Since(<-stopped); took > 2*window {
			t.Fatalf("stall detected %v after the reader stopped, want within two windows (%v)", took, 2*window)
		}
	})
}
