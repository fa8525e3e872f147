package engineapi

import (
	"testing"

	pb "github.com/kvp2p/kvp2p/internal/engineapi/enginepb"
)

// TestWatchQueueBounded: a watcher that does not read is closed once its
// queue passes maxWatchQueued bytes, and posting then fails; post(nil)
// ends the watch as the backend's.
func TestWatchQueueBounded(t *testing.T) {
	w := &watchQueue{wake: make(chan struct{}, 1)}
	big := &pb.SummaryUpdate{WordsPacked: make([]byte, 1<<20)}
	n := 0
	for w.post(big) {
		n++
		if n > maxWatchQueued>>20+1 {
			t.Fatal("the queue took more than its bound")
		}
	}
	if n != maxWatchQueued>>20 {
		t.Fatalf("queued %d MiB, want %d", n, maxWatchQueued>>20)
	}
	if batch, closed, ended := w.take(); len(batch) != n || !closed || ended {
		t.Fatalf("take: %d, closed %v, ended %v", len(batch), closed, ended)
	}
	if w.post(&pb.SummaryUpdate{}) {
		t.Fatal("a closed queue took a post")
	}
	e := &watchQueue{wake: make(chan struct{}, 1)}
	e.post(nil)
	if _, closed, ended := e.take(); !closed || !ended {
		t.Fatal("post(nil) did not end the watch")
	}
}
