package sim

import (
	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// evKind says what an event does when it fires.
type evKind uint8

const (
	evFunc       evKind = iota + 1 // fn()
	evAccept                       // a dial reached the listener of e.node's peer
	evConnected                    // the dialer learns its dial was accepted
	evLost                         // e's connection was reset (EOF/RST): ConnLost
	evMsg                          // a control message arrives at e
	evClosed                       // DataClosed for e (after its ActClose)
	evTxDone                       // a producer job's bytes have left e.node (OpSend)
	evRx                           // those bytes land at the consumer end e
	evCancelDone                   // a producer job's Error frame has left e.node
	evRxEnd                        // that Error frame lands at the consumer end e
	evProgress                     // the writer of job on e sends a Progress frame
	evProgressRx                   // that Progress frame lands at the consumer end e
	evProbe                        // a data-path probe arrives at e
	evProbeAck                     // its answer arrives at e (the prober)
	evRefused                      // e's dial was refused (nobody listens): DialRefused
	evRetransmit                   // the kernel of e's node sends e's held data frames again (hold.go)
	evAnswered                     // the dialer e learns a stopped listener's kernel answered its SYN
)

// event is one entry of the queue. Events are values in one slice: the
// queue allocates nothing per event once it has grown.
type event struct {
	at   int64 // nanoseconds since the network's start
	seq  uint64
	kind evKind
	e    *end  // the end it concerns (at its node, unless nd is set)
	nd   *Node // evAccept: the listener; evClosed: the node
	msg  wire.Message
	op   *txJob // data events
	blks []session.Block
	last bool
	link bool // a piece on its node's link: the link is free once it fired (link.go)
	// queued: a Progress frame of a job none of whose blocks has left its
	// producer yet (Progress{Queued}, as the data path's writer sends for
	// a job waiting for its turn behind others).
	queued bool
	n      uint64 // probe seq
	conn   loads.ConnID
	fn     func()
}

// queue is a binary min-heap of events ordered by (at, seq): the same
// algorithm as container/heap, typed, so that pushing an event does not box
// it into an interface.
type queue []event

func (q queue) less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}

func (q *queue) push(ev event) {
	*q = append(*q, ev)
	h := *q
	j := len(h) - 1
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(j, i) {
			break
		}
		h[i], h[j] = h[j], h[i]
		j = i
	}
}

func (q *queue) pop() event {
	h := *q
	n := len(h) - 1
	h[0], h[n] = h[n], h[0]
	ev := h[n]
	h[n] = event{}
	h = h[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && h.less(r, l) {
			j = r
		}
		if !h.less(j, i) {
			break
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
	*q = h
	return ev
}
