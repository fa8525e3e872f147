package identity

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"sync/atomic"
	"testing"
)

// countConn counts the writes that reach the socket.
type countConn struct {
	net.Conn
	writes atomic.Int64
}

func (c *countConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestCoalescedTLSOneWritePerCall: a 256 KiB Write over TLS (sixteen-plus
// records) reaches the socket in one write, intact; a 1 MiB Write in at
// most coalesceMax-sized writes; a chunk header and its 256 KiB payload
// through WriteBuffers in one write; and AES-GCM is what gets negotiated
// here.
func TestCoalescedTLSOneWritePerCall(t *testing.T) {
	sc, cc := rankCreds(t)
	a, b := net.Pipe()
	cnt := &countConn{Conn: a}
	co := &Coalescer{Conn: cnt}
	client := tls.Client(co, cc.ClientConfig("127.0.0.1:1"))
	server := tls.Server(b, sc.ServerConfig())
	// Closing the pipe, not the TLS ends: a TLS Close would wait to
	// send close_notify to an end nobody reads any more.
	defer a.Close()
	defer b.Close()

	sizes := []int{256 << 10, 1 << 20, 100}
	// Then a chunk as the data path writes it: header frames and payload
	// through WriteBuffers.
	chunk := [][]byte{bytes.Repeat([]byte{'h'}, 40), bytes.Repeat([]byte{'p'}, 256<<10)}
	want := make([]byte, 0, 2<<20)
	for i, n := range sizes {
		want = append(want, bytes.Repeat([]byte{byte('a' + i)}, n)...)
	}
	for _, b := range chunk {
		want = append(want, b...)
	}
	got := make(chan []byte, 1)
	go func() {
		buf := make([]byte, len(want))
		if err := server.Handshake(); err != nil {
			got <- nil
			return
		}
		_, err := io.ReadFull(server, buf)
		if err != nil {
			buf = nil
		}
		got <- buf
	}()
	if err := client.Handshake(); err != nil {
		t.Fatal(err)
	}
	if s := client.ConnectionState().CipherSuite; s != tls.TLS_AES_128_GCM_SHA256 {
		t.Logf("negotiated %s (not AES-128-GCM: no AES hardware?)", tls.CipherSuiteName(s))
	}
	ct := &CoalescedTLS{Conn: client, Co: co}
	off := 0
	for _, n := range sizes {
		before := cnt.writes.Load()
		if k, err := ct.Write(want[off : off+n]); err != nil || k != n {
			t.Fatalf("Write(%d) = %d, %v", n, k, err)
		}
		off += n
		w := cnt.writes.Load() - before
		// Records carry 22 bytes of header and tag per 16 KiB.
		limit := int64((n+n/16384*22+coalesceMax-1)/coalesceMax) + 1
		if n <= 256<<10 {
			limit = 1
		}
		if w < 1 || w > limit {
			t.Errorf("Write(%d): %d socket writes, want 1..%d", n, w, limit)
		}
	}
	before := cnt.writes.Load()
	if k, err := ct.WriteBuffers(chunk); err != nil || k != int64(len(chunk[0])+len(chunk[1])) {
		t.Fatalf("WriteBuffers = %d, %v", k, err)
	}
	if w := cnt.writes.Load() - before; w != 1 {
		t.Errorf("WriteBuffers(header, 256 KiB): %d socket writes, want 1", w)
	}
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("server read %d bytes, not what was written", len(b))
	}
	if ct.NetConn() != cnt {
		t.Error("NetConn is not the socket")
	}
}
