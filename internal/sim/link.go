package sim

import "github.com/kvp2p/kvp2p/internal/session"

// A node's outgoing data link (issue 24). Its connections share it as TCP
// flows share a link: the link sends one piece at a time, taking the
// connections with bytes queued in turn, so a connection queued behind
// another's large transfer still moves (a real kernel interleaves their
// packets). Each connection's own pieces go in order. A piece is at most
// half a ProgressInterval of transfer, and at least one block: on a fast
// link a whole send is one piece, as before; on a slow one the consumer
// hears of the bytes as they land, as a real reader reports each chunk.
// The model this replaced served whole sends first come, first served: a
// slow rank's second consumer heard nothing for as long as the first one's
// backlog lasted, which no real link does.

// piece is one unit of a connection's queued data.
type piece struct {
	tx     *txJob
	blks   []session.Block
	last   bool   // the job's last blocks
	cancel bool   // the job's Error frame (OpCancel), after its queued blocks
	ns     int64  // transfer time
	frame  *event // a small frame (Probe, ProbeAck, Progress): sent when its turn comes, taking no link time
}

// enqueue queues p on e's connection and starts the link if idle.
func (n *Net) enqueue(e *end, p piece) {
	nd := e.node
	if len(e.pieces) == 0 {
		nd.active = append(nd.active, e)
	}
	e.pieces = append(e.pieces, p)
	e.queuedNs += p.ns
	if !nd.linkBusy {
		n.linkNext(nd)
	}
}

// linkNext starts the link's next piece: the next connection in turn that
// has one. It runs when the link goes idle (a piece's evTxDone or
// evCancelDone fired) or a piece is queued on an idle link.
func (n *Net) linkNext(nd *Node) {
	nd.linkBusy = false
	for len(nd.active) > 0 {
		if nd.turn >= len(nd.active) {
			nd.turn = 0
		}
		e := nd.active[nd.turn]
		if len(e.pieces) == 0 || !e.open {
			e.pieces, e.queuedNs = nil, 0
			nd.active = append(nd.active[:nd.turn], nd.active[nd.turn+1:]...)
			continue
		}
		p := e.pieces[0]
		e.pieces = e.pieces[1:]
		e.queuedNs -= p.ns
		if p.frame != nil {
			// Its bytes ahead of it have left: it follows them at once.
			n.toPeer(e, *p.frame, n.now)
			if len(e.pieces) == 0 {
				nd.active = append(nd.active[:nd.turn], nd.active[nd.turn+1:]...)
			}
			continue
		}
		if len(e.pieces) == 0 {
			nd.active = append(nd.active[:nd.turn], nd.active[nd.turn+1:]...)
		} else {
			nd.turn++
		}
		kind := evTxDone
		if p.cancel {
			kind = evCancelDone
		}
		nd.linkBusy = true
		n.schedule(n.now+p.ns, event{kind: kind, e: e, op: p.tx, blks: p.blks, last: p.last, link: true})
		return
	}
}

// sendBlocks queues blocks of producer job tx on e, in pieces.
func (n *Net) sendBlocks(nd *Node, e *end, tx *txJob, blocks []session.Block, last bool, wb int) {
	per := int64(0) // ns per block
	if bw := n.bw(nd); bw > 0 {
		per = int64(float64(wb) / float64(bw) * 1e9)
	}
	k := len(blocks)
	if half := int64(n.ProgressInterval / 2); per > 0 && half > 0 && per*int64(k) > half {
		k = int(max(1, half/per))
	}
	if len(blocks) == 0 {
		n.enqueue(e, piece{tx: tx, last: last})
		return
	}
	for i := 0; i < len(blocks); i += k {
		j := min(i+k, len(blocks))
		n.enqueue(e, piece{tx: tx, blks: blocks[i:j], last: last && j == len(blocks), ns: per * int64(j-i)})
	}
}

// frame sends small frame ev (Probe, ProbeAck, Progress) from e, behind
// the bytes already queued on e's connection, as a kernel sends a write
// after the socket's earlier ones: it goes out once they have left, at
// e's share of the link, and before the bytes queued after it. The writer
// hands the kernel at most SendBuffer of them ahead of it (the rest still
// wait in the writer's own queue, behind the frame). On a real network an
// ack waits behind what is queued on its connection; a model that let it
// skip the queue would be kind to probes of a slow but healthy rank. It
// reports whether the frame waited.
func (n *Net) frame(e *end, ev event) bool {
	if len(e.pieces) == 0 {
		n.toPeer(e, ev, n.now)
		return false
	}
	limit := int64(1) << 62
	if bw := n.bw(e.node); bw > 0 {
		buf := n.SendBuffer
		if buf <= 0 {
			buf = 4 << 20
		}
		limit = int64(float64(buf) / float64(bw) * 1e9)
	}
	i, ahead := 0, int64(0)
	for i < len(e.pieces) && ahead < limit {
		ahead += e.pieces[i].ns
		i++
	}
	e.pieces = append(e.pieces, piece{})
	copy(e.pieces[i+1:], e.pieces[i:])
	e.pieces[i] = piece{frame: &ev}
	return true
}
