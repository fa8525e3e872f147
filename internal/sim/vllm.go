package sim

import (
	"time"

	"github.com/kvp2p/kvp2p/internal/loads"
)

// What Net.VLLMTransport changes: the two places where vLLM's transport
// behaves unlike kvp2p's (issue 8).

// ZMQReconnect is ZMQ's reconnect interval (ZMQ_RECONNECT_IVL, 100 ms): how
// often a DEALER whose peer refused it tries again, silently.
const ZMQReconnect = 100 * time.Millisecond

// redial is a ZMQ reconnect attempt of the dial on me to peer: nobody
// listening is not an event (the DEALER keeps trying; only the handshake
// deadline ends the wait); a listener found now gets the SYN.
func (n *Net) redial(me *end, peer string) {
	if !me.open || me.node.gone || me.node.Crashed || me.peer != nil {
		return // the dialer gave up, or its process is gone
	}
	t := n.nodes[peer]
	switch {
	case t == nil || t.Crashed:
		n.schedule(n.now+int64(ZMQReconnect), event{kind: evFunc, fn: func() { n.redial(me, peer) }})
	case me.node.Silent || t.Silent:
		n.schedule(n.now+int64(time.Second), event{kind: evAccept, e: me, nd: t, n: 1})
	default:
		n.schedule(n.now+n.lat(me.node, t), event{kind: evAccept, e: me, nd: t})
	}
}

// loadTimedOut is the reason a session gives a load that ran out its load
// timeout (internal/session).
const loadTimedOut = "load timed out"

// faultStalled models vLLM #64251 ("fault a peer whose source WRITE
// stalls"): on main, a load that times out with its source's WRITE still
// pending marks that peer dead, so the connection is torn down and every
// other load on the session fails with it; later requests dial it again.
// Here: the consumer's connection that carried the timed-out load is reset
// on both sides (the table sees ConnLost, a hard failure, as after vLLM's
// mark_dead).
func (n *Net) faultStalled(nd *Node, rs []loads.JobResult) {
	for _, r := range rs {
		if r.Kind != loads.JobLoad || r.OK || r.Reason != loadTimedOut {
			continue
		}
		for _, e := range nd.ends.sorted() {
			if _, ok := e.rx[r.Job]; !ok || !e.open {
				continue
			}
			if e.peer != nil && !nd.Silent {
				n.reset(e.peer, n.lat(nd, e.peer.node))
			}
			n.schedule(n.now, event{kind: evLost, e: e})
		}
	}
}
