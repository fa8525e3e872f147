package sim

import (
	"time"

	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// target is the node an event fires at.
func (ev *event) target() *Node {
	if ev.nd != nil {
		return ev.nd
	}
	return ev.e.node
}

func (n *Net) fire(ev event) {
	if ev.kind == evFunc {
		ev.fn()
		return
	}
	nd := ev.target()
	if ev.kind == evAccept && nd.gone {
		if cur := n.nodes[nd.ID]; cur != nil {
			nd = cur // the SYN reaches whoever listens on that address now
		}
	}
	if nd.gone || nd.Crashed {
		return
	}
	if ev.kind == evRetransmit {
		n.retransmit(&ev) // the kernel's, not the process's: a stalled one too
		return
	}
	if nd.stalled {
		if ev.kind == evAccept && ev.e.open && !nd.Silent && !ev.e.node.Silent {
			// The listener's kernel answers the SYN though its process
			// is stopped (the accept waits in the backlog): the dialer's
			// connect completes, its handshake waits (DialAnswered).
			n.schedule(n.now+n.lat(nd, ev.e.node), event{kind: evAnswered, e: ev.e})
		}
		nd.held = append(nd.held, ev) // delivered in order on heal
		return
	}
	switch ev.kind {
	case evAccept:
		n.accept(nd, ev.e, ev.n)
	case evAnswered:
		if ev.e.open {
			nd.T.DialAnswered(n.Now, ev.e.conn)
		}
	case evConnected:
		if ev.e.open {
			nd.T.Connected(n.Now, ev.e.conn)
		} else {
			n.reset(ev.e.peer, n.lat(nd, ev.e.peer.node)) // we hung up before the accept
		}
	case evLost:
		e := ev.e
		if nd.ends.get(e.conn) != e || !e.open {
			return // closed already
		}
		e.open = false
		nd.T.ConnLost(n.Now, e.conn)
	case evRefused:
		e := ev.e
		if nd.ends.get(e.conn) != e || !e.open {
			return // the dialer gave up first
		}
		e.open = false
		nd.T.DialRefused(n.Now, e.conn)
	case evMsg:
		n.deliver(nd, ev.e, ev.msg)
	case evClosed:
		nd.T.DataClosed(n.Now, ev.conn)
	default:
		n.fireData(nd, &ev)
	}
	n.Flush(nd)
}

// synRetries is how often a dial's SYN is retransmitted, at 1, 3, 7, 15
// and 31 s after the first (Linux's backoff); the dialer's handshake
// deadline usually ends it first.
const synRetries = 5

// accept: a dial from me reaches listener t (attempt is 0 for the first
// SYN, k for its k-th retransmission).
func (n *Net) accept(t *Node, me *end, attempt uint64) {
	if !me.open || me.node.gone {
		return // the dialer gave up first
	}
	if t.Silent || me.node.Silent {
		if attempt < synRetries {
			n.schedule(n.now+int64(time.Second)<<attempt, event{kind: evAccept, e: me, nd: t, n: attempt + 1})
		}
		return
	}
	pc := t.T.Accept(n.Now)
	pe := n.newEnd(t, pc)
	pe.peer, me.peer = me, pe
	n.schedule(n.now+n.lat(t, me.node), event{kind: evConnected, e: me})
}

// deliver hands a control message to end e of nd.
func (n *Net) deliver(nd *Node, e *end, m wire.Message) {
	if nd.Silent {
		return
	}
	// An open end is the one its node holds under its conn (only close,
	// which clears open, and crash, which closes all, take it out; conn ids
	// are never reused by a table): open alone says it, without a map
	// lookup per message.
	if !e.open {
		// Our side is closed: the kernel answers with a RST.
		if p := e.peer; p != nil && !p.node.gone {
			n.reset(p, n.lat(nd, p.node))
		}
		return
	}
	switch h := m.(type) {
	case *wire.Hello:
		if nd.RefuseHandshake || (e.peer != nil && e.peer.node.RefuseHandshake) {
			h.HashSeed += "\x00refused" // our session refuses it as incompatible
		}
		e.greet(1)
	case *wire.HelloAck:
		e.greet(2)
	}
	nd.T.ReceiveRef(n.Now, e.ref, m)
}

func (e *end) greet(bit uint8) {
	e.greeted |= bit
	if e.greeted == 3 && e.pending {
		e.pending = false
		e.node.work--
	}
}

// dataCut reports whether the data path between e and its peer is down.
func dataCut(e *end) bool {
	p := e.peer
	return p == nil || e.node.DataBlackhole || e.node.Silent || p.node.DataBlackhole || p.node.Silent
}

func (n *Net) bw(nd *Node) int64 {
	if nd.SlowBps > 0 {
		return nd.SlowBps
	}
	return n.Bandwidth
}

// data performs a data-path operation of end conn of nd.
func (n *Net) data(nd *Node, conn loads.ConnID, op *session.DataOp) {
	e := nd.ends.get(conn)
	if e == nil || !e.open || e.peer == nil {
		return
	}
	switch op.Kind {
	case session.OpExpect:
		if e.rx == nil {
			e.rx = map[uint64]*rxJob{}
		}
		if e.rx[op.Job] == nil {
			nd.work++
			n.wake(nd)
		}
		e.rx[op.Job] = &rxJob{slots: op.Slots}
	case session.OpOpen:
		n.openTx(e, op.Job)
	case session.OpSend:
		tx := n.openTx(e, op.Job)
		tx.blocks = true
		wb := n.WireBlockBytes
		if wb <= 0 {
			wb = nd.Store.BlockBytes()
		}
		n.sendBlocks(nd, e, tx, op.Blocks, op.Last, wb)
	case session.OpCancel:
		tx := n.openTx(e, op.Job)
		n.enqueue(e, piece{tx: tx, cancel: true}) // the Error frame, after the job's queued bytes
	case session.OpProbe:
		n.frame(e, event{kind: evProbe, n: op.Seq})
	}
}

// openTx returns the producer job on e, registering it (and starting its
// Progress frames) the first time.
func (n *Net) openTx(e *end, job uint64) *txJob {
	if tx := e.tx[job]; tx != nil {
		return tx
	}
	if e.tx == nil {
		e.tx = map[uint64]*txJob{}
	}
	tx := &txJob{job: job, from: e}
	e.tx[job] = tx
	e.node.work++
	n.wake(e.node)
	if n.ProgressInterval > 0 {
		n.schedule(n.now, event{kind: evProgress, e: e, op: tx})
	}
	return tx
}

func (n *Net) endTx(tx *txJob) {
	if tx.ended {
		return
	}
	tx.ended = true
	e := tx.from
	delete(e.tx, tx.job)
	e.node.work--
}

// toPeer schedules a data frame from e to its peer, FIFO with e's others:
// it leaves at depart (the link sent it: link.go). On a
// blackholed path, or behind frames one held, the kernel holds it
// (hold.go).
func (n *Net) toPeer(e *end, ev event, depart int64) {
	at := max(depart+n.lat(e.node, e.peer.node), e.dataFloor)
	e.dataFloor = at
	ev.e = e.peer
	if dataCut(e) || len(e.held) > 0 {
		ev.at = at
		n.hold(e, ev)
		return
	}
	n.schedule(at, ev)
}

// refused: data frame ev landed at end e of a node whose data path is
// blackholed since it was sent. The drop refused it: its sender's kernel
// keeps it for a retransmission. It reports whether it did.
func (n *Net) refused(nd *Node, e *end, ev *event) bool {
	if !nd.DataBlackhole && !nd.Silent {
		return false
	}
	if p := e.peer; p != nil && p.open {
		n.hold(p, *ev)
	}
	return true
}

func (n *Net) fireData(nd *Node, ev *event) {
	e, tx := ev.e, ev.op
	if ev.link {
		defer n.linkNext(nd) // the link is free for its next piece
	}
	open := nd.ends.get(e.conn) == e && e.open
	switch ev.kind {
	case evTxDone, evCancelDone, evProgress:
		// At the producer: its writer finished writing, or sends a frame.
		if !open || tx.ended {
			return
		}
		switch {
		case ev.kind == evProgress:
			n.frame(e, event{kind: evProgressRx, n: tx.job, queued: tx.blocks && tx.bytes == 0})
			n.schedule(n.now+int64(n.ProgressInterval), event{kind: evProgress, e: e, op: tx})
		case ev.kind == evCancelDone:
			n.endTx(tx)
			n.toPeer(e, event{kind: evRxEnd, n: tx.job}, n.now)
			nd.T.SendEnd(n.Now, e.conn, tx.job, false, tx.bytes)
		default:
			n.copyBlocks(e, tx.job, ev.blks)
			tx.bytes += uint64(len(ev.blks) * nd.Store.BlockBytes())
			n.toPeer(e, event{kind: evRx, n: tx.job, blks: ev.blks, last: ev.last}, n.now)
			if ev.last {
				n.endTx(tx)
				nd.T.SendEnd(n.Now, e.conn, tx.job, true, tx.bytes)
			}
		}
	case evRx, evRxEnd, evProgressRx:
		// At the consumer: a data frame lands.
		if !open || n.refused(nd, e, ev) {
			return
		}
		rx := e.rx[ev.n]
		if rx == nil {
			return
		}
		switch ev.kind {
		case evProgressRx:
			if ev.queued && rx.got == 0 {
				// Its producer has its blocks and sends others first: the
				// load's start budget runs (datapath's Progress{Queued}).
				nd.T.DataQueued(n.Now, e.conn, ev.n)
				break
			}
			nd.T.DataProgress(n.Now, e.conn, ev.n, rx.got)
		case evRxEnd:
			delete(e.rx, ev.n)
			nd.work--
			nd.T.DataEnd(n.Now, e.conn, ev.n, false, rx.got)
		default:
			rx.got += uint64(len(ev.blks) * nd.Store.BlockBytes())
			nd.T.DataProgress(n.Now, e.conn, ev.n, rx.got)
			if ev.last {
				delete(e.rx, ev.n)
				nd.work--
				nd.T.DataEnd(n.Now, e.conn, ev.n, true, rx.got)
			}
		}
	case evProbe:
		if open && !n.refused(nd, e, ev) {
			if n.frame(e, event{kind: evProbeAck, n: ev.n}) {
				n.queuedAcks++
			}
		}
	case evProbeAck:
		if open && !n.refused(nd, e, ev) {
			n.probeAcks++
			nd.T.ProbeAck(n.Now, e.conn, ev.n)
		}
	}
}

// copyBlocks moves a producer job's blocks into the consumer's reserved
// slots. The bytes are taken when the last of them leaves the producer
// (its slots are pinned until its SendEnd); the consumer's slots stay
// Filling until the job's DataEnd or DataClosed, so nothing else reads
// them before the frames land.
func (n *Net) copyBlocks(e *end, job uint64, blocks []session.Block) {
	p := e.peer
	if p == nil || !p.open {
		return
	}
	rx := p.rx[job]
	if rx == nil {
		return
	}
	src, dst := e.node.Store, p.node.Store
	for _, b := range blocks {
		if int(b.Index) >= len(rx.slots) {
			panic("sim: producer sent a block outside the consumer's fetch")
		}
		copy(dst.Bytes(rx.slots[b.Index]), src.Bytes(b.Slot))
	}
}
