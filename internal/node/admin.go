package node

import (
	"time"

	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// Operator calls: what `kvp2p serve` does on SIGUSR1 and SIGUSR2, and what
// the fault lab uses for its goodbye-idle and refuse-handshake faults. Both
// run in the node's loop, like the Manager's calls.

// RefuseHandshakes makes the node refuse every new handshake (on) as
// incompatible, or accept them again (off). Sessions already up are left
// alone. A refused peer gets Goodbye(incompatible), exactly as from a node
// of another version or hash seed: an operator's way to keep new sessions
// off a node while it is looked at, and the lab's refuse-handshake fault.
func (n *Node) RefuseHandshakes(on bool) error {
	return n.adminCall(func(time.Time) {
		if n.refusing != on {
			n.log.Info("handshakes", "refused", on)
		}
		n.refusing = on
	})
}

// GoodbyeIdle ends every live session in order with Goodbye(idle), as the
// idle eviction does after idle_timeout: the peers reconnect on their next
// request, and none of them takes it as evidence of a fault. It returns
// how many sessions it ended.
func (n *Node) GoodbyeIdle() (int, error) {
	var ended int
	err := n.adminCall(func(now time.Time) {
		for _, sv := range n.tb.View(now).Sessions {
			if sv.State != loads.SessionEnded {
				ended++
			}
		}
		n.tb.EvictAll(now, wire.GoodbyeIdle)
	})
	return ended, err
}

// adminCall runs f in the loop and waits; ErrClosed once the node stopped.
func (n *Node) adminCall(f func(now time.Time)) error {
	return n.Manager().do(f)
}

// helloIn is the Hello the session sees: while the node refuses
// handshakes, one whose hash seed cannot match, so that the session
// refuses it by its own rule (Goodbye(incompatible), cause incompatible)
// and the peer's log says why. Every other message passes unchanged.
func (n *Node) helloIn(m wire.Message) wire.Message {
	h, ok := m.(*wire.Hello)
	if !ok || !n.refusing {
		return m
	}
	r := *h
	r.HashSeed += " (refused: this node refuses handshakes)"
	return &r
}
