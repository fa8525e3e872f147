package node

import (
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/kvp2p/kvp2p/internal/datapath"
	"github.com/kvp2p/kvp2p/internal/fsm"
	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// ctlConn is one control connection and its session's data connection.
// Fields are owned by the node's loop; the writer and reader goroutines
// touch only the socket and the writer's queue.
type ctlConn struct {
	id     loads.ConnID
	nc     net.Conn
	w      *msgWriter
	data   *datapath.Conn
	dataNC net.Conn // data's connection, for the kernel's view of its path (checkPaths)
	st     ctlState
	key    attachKey
	dialed bool // we dialed it: its Hello carries key.attempt and secret
	// secret (dialed only) is this attempt's attach secret: the Hello
	// carries it, the DataAttach a MAC made with it (wire.AttachMAC).
	secret [wire.SecretSize]byte
	// dataLostAt: the peer closed the data connection at this time; the
	// table is told once the control connection explains, or after
	// dataLossGrace (zero: not waiting).
	dataLostAt time.Time
}

// ctlState is where a connection pair is between the table's ActClose and
// the DataClosed the node owes it (loads' contract: exactly once, when no
// data-path goroutine can touch a slot).
//
//	state            event                                          next
//	ctlOpen          data connection ended (Closed event), or       ctlDataDown
//	                 never was (dial or data start failed)
//	                 ActClose                                       ctlClosing
//	ctlDataDown      DataClosed told (dataClosed)                   ctlReported
//	                 ActClose                                       ctlClosing
//	ctlReported      ActClose                                       ctlDone
//	ctlClosing       data path quiet: DataClosed told (dataClosed)   ctlDone
//
// ctlDone is terminal: the connection leaves n.conns as it enters it.
type ctlState uint8

const (
	ctlOpen     ctlState = iota // both connections up, or being dialed
	ctlDataDown                 // the data path is quiet; the table not told yet (maybe waiting dataLossGrace)
	ctlReported                 // the table was told DataClosed; its ActClose is still to come
	ctlClosing                  // ActClose done; waiting for the data path to go quiet
	ctlDone                     // closed and reported
)

var ctlStateNames = [...]string{"open", "data-down", "reported", "closing", "done"}

func (s ctlState) String() string {
	if int(s) < len(ctlStateNames) {
		return ctlStateNames[s]
	}
	return fmt.Sprintf("ctlState(%d)", s)
}

func legalCtlMove(from, to ctlState) bool {
	switch from {
	case ctlOpen:
		return to == ctlDataDown || to == ctlClosing
	case ctlDataDown:
		return to == ctlReported || to == ctlClosing
	case ctlReported, ctlClosing:
		return to == ctlDone
	}
	return false
}

// closing reports whether the table closed it (ActClose seen).
func (c *ctlConn) closing() bool { return c.st >= ctlClosing }

// moveCtl changes c's state; an illegal move is reported (fsm.Illegal).
func (n *Node) moveCtl(c *ctlConn, to ctlState) {
	if !legalCtlMove(c.st, to) {
		fsm.Illegal(n.log, fmt.Sprintf("node: conn %d", c.id), c.st, to)
	}
	c.st = to
	if to == ctlDone {
		delete(n.conns, c.id)
	}
}

// attachKey matches a data connection to its control connection. The
// attempt tells a process's connect attempts apart: an attempt the dialer
// gave up on (its DataAttach stuck behind a partition) may deliver its
// DataAttach only after the next attempt's Hello, and must not pair with it
// (the session would read a dead data connection and fail its first probe).
type attachKey struct {
	peer    string
	inc     uint64
	attempt uint64
}

// pairKey is how the accepting side parks a half until its other half
// comes: the attach key and the MAC that binds the two (for a Hello, the
// MAC its secret makes; for a DataAttach, the one it carries). Attempt
// counters can be learned (an attacker reads its own victim's dial to it)
// but the MAC cannot, so a forged DataAttach parks under its own pairKey,
// pairs with nothing and never displaces the real one (issue 25 #2).
type pairKey struct {
	attachKey
	mac [wire.SecretSize]byte
}

func helloPairKey(h *wire.Hello) pairKey {
	return pairKey{attachKey{h.PeerID, h.Incarnation, h.Attempt}, wire.AttachMAC(h.Secret, h.PeerID, h.Incarnation, h.Attempt)}
}

func attachPairKey(a *wire.DataAttach) pairKey {
	return pairKey{attachKey{a.PeerID, a.Incarnation, a.Attempt}, a.MAC}
}

// msgWriter is the one goroutine that writes a control connection. Senders
// append to a queue under a mutex that is never held across I/O: its
// source's (sendQueues), which guards the queues of all the source's
// control connections.
type msgWriter struct {
	nc      net.Conn
	timeout time.Duration
	share   *sendShare
	mu      *sync.Mutex // share.mu
	queue   []wire.Message
	queued  int // bytes queue's messages will take on the wire, about (sizeOf)
	closing bool
	wake    chan struct{}
	done    chan struct{}

	// The writer goroutine's: the frames of one turn and the messages
	// they encode. Both grow to the largest burst (a step's lookups, a
	// Fetch of many keys); see quietWrites.
	buf   []byte
	batch []wire.Message
	quiet int // small turns in a row
}

// A control connection's writer gives back its grown buffers after
// quietWrites turns in a row of at most keepWriteBuf bytes each. On an
// idle session a turn is a heartbeat, so that is quietWrites heartbeat
// intervals, as for the wire.Reader on the other end (a count of turns,
// not a clock: the goroutine runs only when there is something to write).
const (
	quietWrites  = 4
	keepWriteBuf = 512 // bytes: a heartbeat turn's buffer, kept however quiet
	keepBatch    = 64  // messages
)

// newMsgWriter starts the writer goroutine; it ends after close (once the
// queue is flushed) or on a write error. Its queue counts in its source's
// share of q (nil: a share of its own). wg tracks it.
func newMsgWriter(nc net.Conn, timeout time.Duration, q *sendQueues, wg *sync.WaitGroup) *msgWriter {
	w := &msgWriter{nc: nc, timeout: timeout, wake: make(chan struct{}, 1), done: make(chan struct{})}
	w.share = q.join(nc, w)
	w.mu = &w.share.mu
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer q.leave(w)
		w.run()
	}()
	return w
}

// maxQueued bounds what the control connections of one source queue for
// peers that do not read (bytes buffered per peer), and what one of them
// does (sendQueues): three of the largest control frames. A peer that
// sends lookups and never reads their answers otherwise makes us buffer
// what it asks for, at up to ctlRate messages a second, until the write
// times out. Over it a connection is closed at once, and its session ends
// as a lost connection.
const maxQueued = 3 * 1314846 // wire.ControlFrameLimit(wire.DefaultLimits()), checked by TestMsgWriterBounded

// send queues m; it never blocks. A queue over maxQueued, or a source's
// queues over it, close the connection that queues the most instead
// (sendQueues).
func (w *msgWriter) send(m wire.Message) {
	var over []*msgWriter
	w.mu.Lock()
	if !w.closing {
		w.queue = append(w.queue, m)
		n := sizeOf(m)
		w.queued += n
		w.share.queued += n
		over = w.share.overflow(w)
	}
	w.mu.Unlock()
	for _, o := range over {
		o.nc.Close() // does not block; the reader fails and the session ends
		o.poke()
	}
	w.poke()
}

// sizeOf is about what m takes on the wire: its keys, and a few dozen
// bytes for the rest.
func sizeOf(m wire.Message) int {
	const rest = 64
	switch m := m.(type) {
	case *wire.Lookup:
		return rest + len(m.ReqID) + len(m.Keys)*wire.KeySize
	case *wire.LookupResp:
		return rest + len(m.ReqID) + len(m.Keys)*wire.KeySize + len(m.Hits)/8
	case *wire.Fetch:
		return rest + len(m.ReqID) + len(m.Keys)*(wire.KeySize+4)
	}
	// Anything else, a Summary included, counts as its header only: the
	// bound is for what peers make us queue by asking, and a summary is
	// ours to send, bounded by summary.MaxWords a session and the write
	// timeout. Counted, a large tier's snapshots to a host's ranks in one
	// tick went over the host's share and closed a healthy session, again
	// at each redial.
	return rest
}

// close flushes what is queued (a Goodbye, say), then closes the socket.
func (w *msgWriter) close() {
	w.mu.Lock()
	w.closing = true
	w.mu.Unlock()
	w.poke()
}

func (w *msgWriter) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *msgWriter) run() {
	defer close(w.done)
	defer w.nc.Close()
	for range w.wake {
		w.mu.Lock()
		w.batch, w.queue = w.queue, w.batch[:0] // swapped, not copied
		w.share.queued -= w.queued
		w.queued = 0
		closing := w.closing
		w.mu.Unlock()
		w.buf = w.buf[:0]
		for _, m := range w.batch {
			var err error
			if w.buf, err = wire.Append(w.buf, m); err != nil {
				return // our own bug; the reader sees the close and the session ends
			}
		}
		clear(w.batch)
		if len(w.buf) > 0 {
			_ = w.nc.SetWriteDeadline(time.Now().Add(w.timeout))
			if _, err := w.nc.Write(w.buf); err != nil {
				return
			}
		}
		if closing {
			return
		}
		w.settle()
	}
}

// settle counts a turn towards quietWrites and, at the count, drops the
// buffers that grew past what an idle connection keeps. The queue and
// batch swap every turn, so each is dropped in turn as batch.
func (w *msgWriter) settle() {
	if len(w.buf) > keepWriteBuf || len(w.batch) > keepBatch {
		w.quiet = 0
		return
	}
	if w.quiet++; w.quiet < quietWrites {
		return
	}
	if cap(w.buf) > keepWriteBuf {
		w.buf = nil
	}
	if cap(w.batch) > keepBatch {
		w.batch = nil
	}
}

// ctlRate and ctlBurst bound the control messages one connection hands the
// loop: far below what would make one peer the loop's only customer, and
// above what a consumer needs (a lookup per request and step; the burst
// covers a step of MaxInflight, 1024, requests at once, twice).
const (
	ctlRate  = 10000 // per second
	ctlBurst = 2048
)

// msgBucket is a token bucket owned by one reader goroutine.
type msgBucket struct {
	tokens float64
	last   time.Time
}

// take spends a token at now and returns how long to wait first (0: none).
func (b *msgBucket) take(now time.Time) time.Duration {
	b.tokens = min(ctlBurst, b.tokens+now.Sub(b.last).Seconds()*ctlRate)
	b.last = now
	b.tokens--
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / ctlRate * float64(time.Second))
}
