package engineapi

import (
	"sync"

	pb "github.com/kvp2p/kvp2p/internal/engineapi/enginepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// SummaryBackend is implemented by a backend that holds its peers'
// summaries (find on): WatchSummaries.
type SummaryBackend interface {
	// WatchSummaries starts handing registration's engine every summary
	// update through post, which never blocks and returns false once the
	// stream cannot take more (the backend then stops posting). post(nil)
	// says the backend ended the watch (the engine detached). An error
	// refuses the watch (a gRPC status).
	WatchSummaries(registration uint64, post func(*pb.SummaryUpdate) bool) (stop func(), err error)
}

// maxWatchQueued bounds the bytes of updates queued for one watcher: a
// snapshot of 1,000 peers with 64 Ki-chunk tiers is about 190 MiB, of
// 8 Ki-chunk tiers 24 MiB. Over it the stream ends RESOURCE_EXHAUSTED and
// the engine watches again (a fresh snapshot) when it is ready to read.
const maxWatchQueued = 64 << 20

// watchQueue is one watcher's queue: the backend posts from its loop, the
// stream's goroutine sends.
type watchQueue struct {
	mu     sync.Mutex
	q      []*pb.SummaryUpdate
	bytes  int
	closed bool // over maxWatchQueued, or the backend ended the watch
	ended  bool // the backend ended it (post(nil))
	wake   chan struct{}
}

func (w *watchQueue) post(u *pb.SummaryUpdate) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	switch {
	case u == nil:
		w.closed, w.ended = true, true
	case w.bytes+len(u.WordsPacked) > maxWatchQueued:
		w.closed = true
	default:
		w.q = append(w.q, u)
		w.bytes += len(u.WordsPacked)
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return !w.closed
}

// take returns what is queued, and whether the queue is closed (and why).
func (w *watchQueue) take() (batch []*pb.SummaryUpdate, closed, ended bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	batch, w.q, w.bytes = w.q, nil, 0
	return batch, w.closed, w.ended
}

// WatchSummaries implements the engine API's WatchSummaries.
func (s *Server) WatchSummaries(req *pb.WatchSummariesRequest, stream pb.Engine_WatchSummariesServer) error {
	sb, ok := s.b.(SummaryBackend)
	if !ok {
		return status.Error(codes.Unimplemented, "this sidecar keeps no peer summaries (find is off)")
	}
	w := &watchQueue{wake: make(chan struct{}, 1)}
	stop, err := sb.WatchSummaries(req.Registration, w.post)
	if err != nil {
		return err
	}
	defer stop()
	for {
		batch, closed, ended := w.take()
		for _, u := range batch {
			if err := stream.Send(u); err != nil {
				return err
			}
		}
		switch {
		case ended:
			return status.Error(codes.FailedPrecondition, "the engine detached")
		case closed:
			return status.Error(codes.ResourceExhausted, "summary updates not read fast enough: watch again")
		}
		select {
		case <-w.wake:
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}
