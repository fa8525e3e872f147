package node

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/wire"
)

// TestMsgBucket: a burst passes at once, then messages are paced at
// ctlRate, and the budget refills while the peer is quiet.
func TestMsgBucket(t *testing.T) {
	t0 := time.Unix(0, 0)
	b := msgBucket{tokens: ctlBurst, last: t0}
	for i := range ctlBurst {
		if w := b.take(t0); w != 0 {
			t.Fatalf("message %d of the burst waits %v", i, w)
		}
	}
	if w := b.take(t0); w != time.Second/ctlRate {
		t.Fatalf("first message over the burst waits %v, want %v", w, time.Second/ctlRate)
	}
	if w := b.take(t0); w != 2*time.Second/ctlRate {
		t.Fatalf("second waits %v", w)
	}
	if w := b.take(t0.Add(time.Second)); w != 0 {
		t.Fatalf("after a quiet second: waits %v", w)
	}
}

// The connection pair's transition table allows exactly the moves its doc
// lists; every other pair, staying put included, is illegal.
func TestCtlStateMoves(t *testing.T) {
	legal := map[[2]ctlState]bool{
		{ctlOpen, ctlDataDown}: true, {ctlOpen, ctlClosing}: true,
		{ctlDataDown, ctlReported}: true, {ctlDataDown, ctlClosing}: true,
		{ctlReported, ctlDone}: true, {ctlClosing, ctlDone}: true,
	}
	for from := ctlOpen; from <= ctlDone; from++ {
		for to := ctlOpen; to <= ctlDone; to++ {
			if got := legalCtlMove(from, to); got != legal[[2]ctlState{from, to}] {
				t.Errorf("legalCtlMove(%v, %v) = %v", from, to, got)
			}
		}
	}
}

// TestMsgWriterShrinks: the writer's buffers grow for a burst and are kept
// while bursts come, and given back after quietWrites small turns in a
// row, not one turn earlier. Each message is read off the pipe before the
// next is sent, so each is a turn of its own.
func TestMsgWriterShrinks(t *testing.T) {
	big := make([]wire.Message, 200)
	for i := range big {
		big[i] = &wire.Lookup{ReqID: fmt.Sprint("r", i), Keys: make([]wire.Key, 4)} // ~100 bytes each
	}
	for _, small := range []int{quietWrites - 1, quietWrites} {
		a, b := net.Pipe()
		var wg sync.WaitGroup
		w := newMsgWriter(a, time.Minute, nil, &wg)
		rd := wire.NewReader(b, wire.DefaultLimits())
		read := func(n int) {
			for range n {
				if _, err := rd.Next(); err != nil {
					t.Fatal(err)
				}
			}
		}
		w.mu.Lock() // one turn: the whole burst is queued before the writer looks
		w.queue = append(w.queue, big...)
		w.mu.Unlock()
		w.poke()
		read(len(big))
		for i := range small {
			w.send(&wire.Ping{Seq: uint64(i)})
			read(1)
		}
		w.close()
		wg.Wait()
		b.Close()
		grown := cap(w.buf) > keepWriteBuf || cap(w.batch) > keepBatch || cap(w.queue) > keepBatch
		if want := small < quietWrites; grown != want {
			t.Errorf("after %d small turns: buffers kept %v (buf %d, batch %d, queue %d), want %v",
				small, grown, cap(w.buf), cap(w.batch), cap(w.queue), want)
		}
	}
}

// TestMsgWriterBounded: a peer that never reads makes its control
// connection's queue grow with every answer; past maxQueued the connection
// is closed and the queue dropped, rather than buffering without bound.
func TestMsgWriterBounded(t *testing.T) {
	if want := 3 * int(wire.ControlFrameLimit(wire.DefaultLimits())); maxQueued != want {
		t.Fatalf("maxQueued %d, want three control frames, %d", maxQueued, want)
	}
	a, b := net.Pipe() // b is never read: the writer blocks on its first write
	defer b.Close()
	var wg sync.WaitGroup
	w := newMsgWriter(a, time.Minute, nil, &wg)
	resp := &wire.LookupResp{ReqID: "r", Keys: make([]wire.Key, 100), Hits: make([]bool, 100)}
	sent := 0
	for ; sent < 10*maxQueued/sizeOf(resp); sent++ {
		w.send(resp)
		w.mu.Lock()
		closing, queued := w.closing, w.queued
		w.mu.Unlock()
		if queued > maxQueued {
			t.Fatalf("queue holds %d bytes, over %d", queued, maxQueued)
		}
		if closing {
			break
		}
	}
	w.mu.Lock()
	closing, held := w.closing, len(w.queue)
	w.mu.Unlock()
	if !closing || held != 0 {
		t.Fatalf("after %d answers nobody read: closing %v, %d queued", sent, closing, held)
	}
	wg.Wait() // the writer's blocked write failed with the closed pipe
	if _, err := a.Write([]byte{0}); err == nil {
		t.Fatal("the connection is still open")
	}
}

// TestSendQueuesShareBySource: the control connections of one source
// queue at most maxQueued together. Eight that never read have their
// answers queued in turn; each send that takes the source over closes the
// connection that queues the most, and one connection of the same source
// whose peer reads every answer is never closed. Before, each of the eight
// queued up to maxQueued: eight times the source's share.
func TestSendQueuesShareBySource(t *testing.T) {
	var q sendQueues
	var wg sync.WaitGroup
	resp := &wire.LookupResp{ReqID: "r", Keys: make([]wire.Key, 1000), Hits: make([]bool, 1000)}
	const deaf = 8
	ws := make([]*msgWriter, deaf)
	for i := range ws {
		a, b := net.Pipe() // b is never read: each writer blocks on its first write
		defer b.Close()
		ws[i] = newMsgWriter(a, time.Minute, &q, &wg)
	}
	a, b := net.Pipe()
	good := newMsgWriter(a, time.Minute, &q, &wg)
	rd := wire.NewReader(b, wire.DefaultLimits())
	src := sourceHost(a)
	peak, closed := 0, 0
	for round := 0; closed < deaf && round < 10*maxQueued/sizeOf(resp); round++ {
		closed = 0
		for _, w := range ws {
			w.send(resp)
			w.mu.Lock()
			if w.closing {
				closed++
			}
			w.mu.Unlock()
			peak = max(peak, q.queued(src))
		}
		good.send(resp)
		if _, err := rd.Next(); err != nil {
			t.Fatalf("round %d: the reading connection of the source was closed: %v", round, err)
		}
	}
	t.Logf("peak %d bytes queued for the source (bound %d); %d of %d connections that never read closed", peak, maxQueued, closed, deaf)
	if peak > maxQueued {
		t.Fatalf("the source queued %d bytes, over %d", peak, maxQueued)
	}
	if closed != deaf {
		t.Fatalf("%d of %d connections that never read were closed", closed, deaf)
	}
	good.mu.Lock()
	if good.closing {
		t.Fatal("the reading connection was closed")
	}
	good.mu.Unlock()
	good.close()
	if _, err := rd.Next(); err == nil {
		t.Fatal("read after close")
	}
	wg.Wait()
	if n := q.queued(src); n != 0 || len(q.src) != 0 {
		t.Fatalf("after every writer ended: %d bytes, %d sources kept", n, len(q.src))
	}
	// The loop may send on a writer that a write error ended before it
	// heard: nothing is queued or counted.
	a, b = net.Pipe()
	w := newMsgWriter(a, time.Minute, &q, &wg)
	b.Close()
	w.send(resp) // its write fails: the writer ends
	wg.Wait()
	w.send(resp)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.queued != 0 || w.share.queued != 0 || len(w.queue) != 0 {
		t.Fatalf("a send after the writer ended queued %d bytes (source %d)", w.queued, w.share.queued)
	}
}
