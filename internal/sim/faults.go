package sim

import (
	"fmt"

	"github.com/kvp2p/kvp2p/internal/wire"
)

// Fault injection. Each method acts on the current node of peer id at Now.
// The exported methods then Run (performing what is due at once, as the
// first simulator did); the runner uses the unexported ones from inside
// events.

// Crash kills a node: its process and state are gone, its peers see their
// connections reset, and dials to it are refused until Heal or Restart
// bring up a fresh incarnation.
func (n *Net) Crash(id string) { n.crash(n.must(id)); n.Run() }

// CloseControl resets every connection of a node once (its side and the
// peer's see the reset); the process lives on, as rank 0 in vLLM #56828.
func (n *Net) CloseControl(id string) { n.closeControl(n.must(id)); n.Run() }

// Stall pauses a node's process: it handles no events and no ticks; what
// reaches it is queued and delivered in order by Heal.
func (n *Net) Stall(id string) { n.must(id).stalled = true }

// GoodbyeIdle ends each of the node's sessions in order as an idle
// eviction would: Goodbye(idle), then a clean close.
func (n *Net) GoodbyeIdle(id string) { n.goodbyeIdle(n.must(id)); n.Run() }

// Restart crashes a node and brings it back at once as a new incarnation.
func (n *Net) Restart(id string) (*Node, error) {
	nd, err := n.restart(n.must(id))
	n.Run()
	return nd, err
}

// Heal ends every fault of a node: flags cleared, a stalled process
// resumes (its queued events first), a crashed one comes back as a fresh
// node with a new incarnation.
func (n *Net) Heal(id string) (*Node, error) {
	nd, err := n.heal(n.must(id))
	n.Run()
	return nd, err
}

func (n *Net) must(id string) *Node {
	nd := n.nodes[id]
	if nd == nil {
		panic(fmt.Sprintf("sim: no node %q", id))
	}
	return nd
}

func (n *Net) crash(nd *Node) {
	if nd.Crashed {
		return
	}
	for _, e := range nd.ends.sorted() {
		if e.open && e.peer != nil && !nd.Silent {
			n.reset(e.peer, n.lat(nd, e.peer.node))
		}
		e.open = false
		e.drop()
	}
	nd.Crashed = true
	nd.stalled = false
	nd.held = nil
	nd.ends = ends{}
}

func (n *Net) closeControl(nd *Node) {
	if !nd.tickable() {
		return
	}
	for _, e := range nd.ends.sorted() {
		if !e.open {
			continue
		}
		if e.peer != nil && !nd.Silent {
			n.reset(e.peer, n.lat(nd, e.peer.node))
		}
		n.schedule(n.now, event{kind: evLost, e: e})
	}
}

func (n *Net) goodbyeIdle(nd *Node) {
	if !nd.tickable() {
		return
	}
	nd.T.EvictAll(n.Now, wire.GoodbyeIdle) // as its idle eviction would
	n.Flush(nd)
}

func (n *Net) restart(nd *Node) (*Node, error) {
	n.crash(nd)
	o := nd.opts
	o.Incarnation = max(o.Incarnation, 1) + 1
	nn, err := n.Replace(nd, o)
	if err == nil {
		nn.Rank = nd.Rank
	}
	return nn, err
}

func (n *Net) heal(nd *Node) (*Node, error) {
	nd.Silent, nd.DataBlackhole, nd.RefuseHandshake = false, false, false
	nd.SlowBps, nd.ExtraDelay = 0, 0
	if nd.Crashed {
		return n.restart(nd)
	}
	if nd.stalled {
		nd.stalled = false
		held := nd.held
		nd.held = nil
		for _, ev := range held {
			n.schedule(n.now, ev)
		}
		n.wake(nd)
	}
	return nd, nil
}
