package sim

import (
	"slices"
	"time"
)

// A blackholed data path, as TCP has it (issue 24 item 5). The kernel does
// not lose what a drop refused: it keeps the stream's unacknowledged bytes
// and sends them again at each retransmission, 0.2 s × (2^k − 1) after the
// first refused send (RTO 200 ms, doubling), and nothing later in the
// stream is delivered past that hole. When a retransmission finds the path
// open again, everything held arrives, in order; when the oldest held
// frame has waited UserTimeout (TCP_USER_TIMEOUT, which the node sets to
// its heartbeat timeout), the retransmission aborts the connection
// instead: the sender's side fails, and its RST is lost in the drop. The
// model before this one lost a cut job's stream for good, which the fault
// lab contradicted (README, fault lab: the same 101 flapping requests that
// the simulator failed were served in the lab after each heal).

// rtoMin is the first retransmission timeout (Linux's TCP_RTO_MIN).
const rtoMin = 200 * time.Millisecond

// hold keeps data frame ev (already aimed at e.peer, ev.at its arrival had
// the path been open) at e until a retransmission gets it through.
func (n *Net) hold(e *end, ev event) {
	if len(e.held) == 0 {
		e.heldSince = n.now
		e.rtoK = 0
		n.armRetransmit(e)
	}
	e.held = append(e.held, ev)
}

// armRetransmit schedules e's next retransmission.
func (n *Net) armRetransmit(e *end) {
	e.rtoK++
	at := e.heldSince + int64(rtoMin)*(int64(1)<<e.rtoK-1)
	n.schedule(at, event{kind: evRetransmit, e: e, n: e.heldGen})
}

// retransmit fires at e (the sending end) when its held frames are sent
// again.
func (n *Net) retransmit(ev *event) {
	e := ev.e
	if ev.n != e.heldGen || len(e.held) == 0 || !e.open {
		return // delivered, dropped or aborted since it was armed
	}
	if !dataCut(e) {
		// Through: the held frames arrive in stream order, and whatever
		// is sent next queues behind them (dataFloor).
		held := e.held
		e.held = nil
		e.heldGen++
		slices.SortStableFunc(held, func(a, b event) int {
			switch {
			case a.at < b.at:
				return -1
			case a.at > b.at:
				return 1
			}
			return 0
		})
		arrive := n.now + n.lat(e.node, e.peer.node)
		for _, h := range held {
			at := max(arrive, e.dataFloor)
			e.dataFloor = at
			n.schedule(at, h)
		}
		return
	}
	if n.UserTimeout > 0 && n.now-e.heldSince >= int64(n.UserTimeout) {
		// TCP_USER_TIMEOUT: the kernel gives up on the connection. Only
		// this side hears of it: the RST it sends is lost in the drop.
		e.held = nil
		e.heldGen++
		n.schedule(n.now, event{kind: evLost, e: e})
		return
	}
	n.armRetransmit(e)
}
