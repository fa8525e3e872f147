package datapath

import (
	"net"
	"sync/atomic"
	"testing"
)

// buffersConn is a connection that implements BuffersWriter by joining the
// buffers into one Write (as kvp2p's TLS connection joins their records),
// and counts the calls.
type buffersConn struct {
	net.Conn
	calls  atomic.Int64
	chunks atomic.Int64 // payloads written
	bad    atomic.Int64 // calls that were not {frames, payload, [header, payload]...}
	buf    []byte       // only the writer goroutine writes
}

func (c *buffersConn) WriteBuffers(bufs [][]byte) (int64, error) {
	c.calls.Add(1)
	c.chunks.Add(int64(len(bufs) / 2))
	bad := len(bufs)%2 != 0
	for _, b := range bufs {
		bad = bad || len(b) == 0
	}
	if bad {
		c.bad.Add(1)
	}
	c.buf = c.buf[:0]
	for _, b := range bufs {
		c.buf = append(c.buf, b...)
	}
	n, err := c.Conn.Write(c.buf)
	return int64(n), err
}

// TestChunkThroughBuffersWriter: on a connection that is a BuffersWriter,
// chunks go out maxBatch to a WriteBuffers call of their headers and
// payloads (the TLS connection then makes one socket write of them), and
// the bytes arrive intact.
func TestChunkThroughBuffersWriter(t *testing.T) {
	na, nb := net.Pipe()
	bw := &buffersConn{Conn: na}
	cfg := testCfg()
	a := startPeer(t, bw, cfg, 8)
	b := startPeer(t, nb, cfg, 8)
	defer a.stop(t)
	defer b.stop(t)

	j := job{id: 3, src: seq(0, 3), dst: seq(4, 3)}
	j.prepare(a, b)
	a.c.Send(j.id, j.blocks(0, 3), true)
	j.verify(t, a, b)
	chunks := int64(len(j.src) * ((cfg.BlockBytes + cfg.ChunkBytes - 1) / cfg.ChunkBytes))
	if got := bw.chunks.Load(); got != chunks {
		t.Errorf("%d payloads written, want %d", got, chunks)
	}
	if got, want := bw.calls.Load(), (chunks+maxBatch-1)/maxBatch; got != want {
		t.Errorf("%d WriteBuffers calls for %d chunks, want %d", got, chunks, want)
	}
	if n := bw.bad.Load(); n != 0 {
		t.Errorf("%d WriteBuffers calls were not {frames, payload, [header, payload]...}", n)
	}
}
