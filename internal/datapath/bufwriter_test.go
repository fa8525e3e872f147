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
	calls atomic.Int64
	bad   atomic.Int64 // calls that were not {frames, payload}
	buf   []byte       // only the writer goroutine writes
}

func (c *buffersConn) WriteBuffers(bufs [][]byte) (int64, error) {
	c.calls.Add(1)
	if len(bufs) != 2 || len(bufs[0]) == 0 || len(bufs[1]) == 0 {
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
// each chunk goes out as one WriteBuffers call of its header and payload
// (the TLS connection then makes one socket write of both), and the bytes
// arrive intact.
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
	if got := bw.calls.Load(); got != chunks {
		t.Errorf("%d WriteBuffers calls, want one per chunk (%d)", got, chunks)
	}
	if n := bw.bad.Load(); n != 0 {
		t.Errorf("%d WriteBuffers calls were not {frames, payload}", n)
	}
}
