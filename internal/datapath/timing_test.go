package datapath

import (
	"errors"
	"io"
	"net"
	"testing"
	"testing/synctest"
	"time"
)

// TestQueuedProgress: an opened job with no blocks yet shows life with a
// Progress every ProgressInterval, not queued (it waits for blocks, not for
// its turn), and then transfers.
func TestQueuedProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		na, nb := net.Pipe()
		cfg := Config{BlockBytes: 4096, ChunkBytes: 1024, ProgressInterval: 40 * time.Millisecond}
		a := startPeer(t, na, cfg, 2)
		b := startPeer(t, nb, cfg, 2)
		defer a.stop(t)
		defer b.stop(t)
		start := time.Now()
		j := job{id: 5, src: []uint32{0, 1}, dst: []uint32{1, 0}}
		j.prepare(a, b)
		a.c.Open(j.id)
		for k := 1; k <= 5; k++ {
			e := b.ev.waitFor(t, "RecvProgress", func(e Event) bool { _, ok := e.(RecvProgress); return ok })
			if e != (RecvProgress{Job: j.id}) {
				t.Fatalf("progress %d: %+v", k, e)
			}
			if got, want := time.Since(start), time.Duration(k)*cfg.ProgressInterval; got != want {
				t.Fatalf("progress %d at %v, want %v", k, got, want)
			}
		}
		// One block arrives: the job is no longer queued, and it waits for
		// more with non-queued progress carrying its bytes.
		a.c.Send(j.id, j.blocks(0, 1), false)
		sent := time.Now()
		// The first chunk is reported at once (the rest are coalesced)...
		if e := b.ev.waitFor(t, "RecvProgress", func(e Event) bool { _, ok := e.(RecvProgress); return ok }); e != (RecvProgress{Job: j.id, Bytes: 1024}) {
			t.Fatalf("first chunk: %+v", e)
		}
		// ...then the producer's next Progress frame carries the whole block.
		if e := b.ev.waitFor(t, "RecvProgress", func(e Event) bool { _, ok := e.(RecvProgress); return ok }); e != (RecvProgress{Job: j.id, Bytes: 4096}) {
			t.Fatalf("progress: %+v", e)
		}
		if got := time.Since(sent); got != cfg.ProgressInterval {
			t.Fatalf("progress after a block at %v, want %v", got, cfg.ProgressInterval)
		}
		a.c.Send(j.id, j.blocks(1, 2), true)
		j.verify(t, a, b)
	})
}

// TestReadTimeout: a peer that sends nothing is given up after ReadTimeout.
func TestReadTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		na, raw := net.Pipe()
		drained := make(chan struct{})
		go func() { defer close(drained); io.Copy(io.Discard, raw) }()
		cfg := Config{BlockBytes: 64, ReadTimeout: 1500 * time.Millisecond}
		start := time.Now()
		a := startPeer(t, na, cfg, 1)
		e := a.ev.closed(t)
		if !errors.Is(e.Err, ErrTimeout) {
			t.Fatalf("Closed{%v}, want ErrTimeout", e.Err)
		}
		if got := time.Since(start); got != cfg.ReadTimeout {
			t.Fatalf("closed after %v, want %v", got, cfg.ReadTimeout)
		}
		raw.Close()
		<-drained
		a.stop(t)
	})
}

// TestKeepalive: two idle Conns keep each other alive with keepalives far
// past the read timeout; the keepalives are not answered or reported.
func TestKeepalive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		na, nb := net.Pipe()
		cfg := Config{BlockBytes: 64}
		a := startPeer(t, na, cfg, 1)
		b := startPeer(t, nb, cfg, 1)
		defer a.stop(t)
		defer b.stop(t)
		idle := time.NewTimer(30 * time.Second)
		<-idle.C
		synctest.Wait()
		if evs := append(a.ev.all(), b.ev.all()...); len(evs) != 0 {
			t.Fatalf("idle connection emitted %v", evs)
		}
	})
}

// TestWriteTimeout: a peer that stops reading fails the writer after
// WriteTimeout, even while the peer keeps sending.
func TestWriteTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		na, raw := net.Pipe()
		cfg := Config{BlockBytes: 64, WriteTimeout: time.Second, KeepaliveInterval: 100 * time.Millisecond}
		start := time.Now()
		a := startPeer(t, na, cfg, 1)
		e := a.ev.closed(t)
		if !errors.Is(e.Err, ErrTimeout) {
			t.Fatalf("Closed{%v}, want ErrTimeout", e.Err)
		}
		// The first keepalive goes out at 100ms and blocks for 1s.
		if got, want := time.Since(start), 1100*time.Millisecond; got != want {
			t.Fatalf("closed after %v, want %v", got, want)
		}
		raw.Close()
		a.stop(t)
	})
}
