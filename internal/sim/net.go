package sim

import (
	"fmt"
	"time"

	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/store"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// Net is an in-memory network of nodes' decision cores on a virtual clock.
// Messages cross it through the wire codec (encode, then decode), so nodes
// never share memory; block bytes are copied slot to slot. Delivery is FIFO
// and instantaneous unless a fault says otherwise; everything is
// deterministic.
type Net struct {
	Now   time.Time
	Tick  time.Duration // timer granularity of Advance
	nodes map[string]*Node
	order []*Node // creation order: deterministic iteration
	queue []func()
	lim   wire.Limits
	Dials []Dial // every dial attempted, in order

	lastProgress time.Time
}

// progress delivers a Progress for every open producer job whose data path
// works, as the data path's writer does every progress interval.
func (n *Net) progress() {
	for _, nd := range n.order {
		for _, e := range nd.ends {
			p := e.peer
			if !e.open || p == nil || len(e.opened) == 0 || nd.DataBlackhole || p.node.DataBlackhole ||
				nd.Silent || p.node.Silent || p.node.Crashed || nd.Crashed {
				continue
			}
			for job := range e.opened {
				bytes := p.got[job]
				n.later(func() { p.node.T.DataProgress(n.Now, p.conn, job, bytes) })
			}
		}
	}
	n.Run()
}

// Dial records one outbound dial.
type Dial struct {
	From, To string
	At       time.Time
}

// Node is one kvp2p node in the network.
type Node struct {
	ID    string
	T     *loads.Table
	Store *store.Store
	net   *Net
	ends  map[loads.ConnID]*end

	Crashed       bool // process gone: its connections reset, dials refused
	Silent        bool // process paused or blackholed: nothing in or out, connections stay open
	DataBlackhole bool // data path silently drops everything
	Results       []loads.JobResult
}

type end struct {
	node    *Node
	conn    loads.ConnID
	peer    *end
	open    bool
	expects map[uint64][]store.Slot // consumer jobs: destination slots
	got     map[uint64]uint64       // consumer jobs: bytes landed
	opened  map[uint64]bool         // producer jobs open on the data path (Progress every interval)
}

// NewNet returns an empty network whose clock starts at start.
func NewNet(start time.Time) *Net {
	return &Net{Now: start, Tick: 10 * time.Millisecond, nodes: map[string]*Node{}, lim: wire.DefaultLimits()}
}

// Add registers a node built by the caller around its table and store.
func (n *Net) Add(id string, t *loads.Table, st *store.Store) *Node {
	nd := &Node{ID: id, T: t, Store: st, net: n, ends: map[loads.ConnID]*end{}}
	n.nodes[id] = nd
	n.order = append(n.order, nd)
	return nd
}

// Node returns the node with id, or nil.
func (n *Net) Node(id string) *Node { return n.nodes[id] }

// Run performs every pending action and delivery until the network is quiet.
func (n *Net) Run() {
	for {
		for _, nd := range n.order {
			if nd.Crashed {
				nd.T.TakeActions()
				continue
			}
			for _, a := range nd.T.TakeActions() {
				n.act(nd, a)
			}
			nd.Results = append(nd.Results, nd.T.PollFinished()...)
		}
		if len(n.queue) == 0 {
			return
		}
		f := n.queue[0]
		n.queue[0] = nil
		n.queue = n.queue[1:]
		f()
	}
}

// Advance moves the clock by d in Tick steps, running every timer.
func (n *Net) Advance(d time.Duration) {
	end := n.Now.Add(d)
	for n.Now.Before(end) {
		step := n.Tick
		if rem := end.Sub(n.Now); rem < step {
			step = rem
		}
		n.Now = n.Now.Add(step)
		if n.Now.Sub(n.lastProgress) >= 100*time.Millisecond {
			n.lastProgress = n.Now
			n.progress()
		}
		for _, nd := range n.order {
			if !nd.Crashed && !nd.Silent {
				nd.T.Tick(n.Now)
			}
		}
		n.Run()
	}
}

func (n *Net) later(f func()) { n.queue = append(n.queue, f) }

func (n *Net) act(nd *Node, a loads.Action) {
	switch a.Kind {
	case loads.ActDial:
		n.dial(nd, a.Conn, a.Peer)
	case loads.ActSend:
		e := nd.ends[a.Conn]
		if e == nil || !e.open || nd.Silent || e.peer.node.Silent || e.peer.node.Crashed {
			return
		}
		m := n.copyMsg(a.Msg)
		p := e.peer
		n.later(func() {
			if p.open && !p.node.Crashed {
				p.node.T.Receive(n.Now, p.conn, m)
			}
		})
	case loads.ActData:
		n.data(nd, a.Conn, a.Op)
	case loads.ActClose:
		n.close(nd, a.Conn)
	}
}

func (n *Net) copyMsg(m wire.Message) wire.Message {
	b, err := wire.Append(nil, m)
	if err != nil {
		panic(fmt.Sprintf("sim: encode %T: %v", m, err))
	}
	out, err := wire.Decode(wire.Type(b[5]), b[6:], n.lim)
	if err != nil {
		panic(fmt.Sprintf("sim: decode %T: %v", m, err))
	}
	return out
}

func (n *Net) dial(nd *Node, conn loads.ConnID, peer string) {
	n.Dials = append(n.Dials, Dial{From: nd.ID, To: peer, At: n.Now})
	me := &end{node: nd, conn: conn, open: true, expects: map[uint64][]store.Slot{}, got: map[uint64]uint64{}}
	nd.ends[conn] = me
	t := n.nodes[peer]
	if t == nil || t.Crashed {
		me.open = false
		n.later(func() { nd.T.ConnLost(n.Now, conn) })
		return
	}
	if t.Silent {
		return // the SYN goes nowhere: the handshake deadline decides
	}
	n.later(func() {
		if !me.open {
			return
		}
		pc := t.T.Accept(n.Now)
		pe := &end{node: t, conn: pc, open: true, peer: me, expects: map[uint64][]store.Slot{}, got: map[uint64]uint64{}}
		t.ends[pc] = pe
		me.peer = pe
		nd.T.Connected(n.Now, conn)
	})
}

func (n *Net) close(nd *Node, conn loads.ConnID) {
	e := nd.ends[conn]
	if e == nil {
		n.later(func() { nd.T.DataClosed(n.Now, conn) })
		return
	}
	delete(nd.ends, conn)
	e.open = false
	n.later(func() { nd.T.DataClosed(n.Now, conn) })
	if p := e.peer; p != nil && p.open && !p.node.Silent {
		p.open = false
		n.later(func() {
			if !p.node.Crashed {
				p.node.T.ConnLost(n.Now, p.conn)
			}
		})
	}
}

func (n *Net) data(nd *Node, conn loads.ConnID, op session.DataOp) {
	e := nd.ends[conn]
	if e == nil || !e.open {
		return
	}
	if op.Kind == session.OpExpect {
		e.expects[op.Job] = op.Slots
		return
	}
	p := e.peer
	if p == nil || nd.DataBlackhole || p.node.DataBlackhole || nd.Silent || p.node.Silent || p.node.Crashed {
		return // the bytes never arrive; nor does the writer finish
	}
	switch op.Kind {
	case session.OpOpen:
		if e.opened == nil {
			e.opened = map[uint64]bool{}
		}
		e.opened[op.Job] = true
		n.later(func() { p.node.T.DataProgress(n.Now, p.conn, op.Job, 0) })
	case session.OpProbe:
		n.later(func() { nd.T.ProbeAck(n.Now, conn, op.Seq) })
	case session.OpSend:
		dst := p.expects[op.Job]
		for _, b := range op.Blocks {
			if int(b.Index) >= len(dst) {
				panic("sim: producer sent a block outside the consumer's fetch")
			}
			copy(p.node.Store.Bytes(dst[b.Index]), nd.Store.Bytes(b.Slot))
			p.got[op.Job] += uint64(nd.Store.BlockBytes())
		}
		bytes := p.got[op.Job]
		n.later(func() { p.node.T.DataProgress(n.Now, p.conn, op.Job, bytes) })
		if op.Last {
			delete(e.opened, op.Job)
			n.later(func() {
				delete(p.expects, op.Job)
				p.node.T.DataEnd(n.Now, p.conn, op.Job, true, bytes)
			})
			n.later(func() { nd.T.SendEnd(n.Now, conn, op.Job, true, bytes) })
		}
	case session.OpCancel:
		delete(e.opened, op.Job)
		bytes := p.got[op.Job]
		n.later(func() {
			delete(p.expects, op.Job)
			p.node.T.DataEnd(n.Now, p.conn, op.Job, false, bytes)
		})
		n.later(func() { nd.T.SendEnd(n.Now, conn, op.Job, false, bytes) })
	}
}

// Crash kills a node: its peers see their connections reset.
func (n *Net) Crash(id string) {
	nd := n.nodes[id]
	nd.Crashed = true
	for _, e := range nd.ends {
		e.open = false
		if p := e.peer; p != nil && p.open {
			p.open = false
			n.later(func() { p.node.T.ConnLost(n.Now, p.conn) })
		}
	}
	n.Run()
}

// CloseControl resets one node's connections from its side (its process
// lives on but its sockets are gone), as rank 0 in vLLM #56828.
func (n *Net) CloseControl(id string) {
	nd := n.nodes[id]
	for _, e := range nd.ends {
		if e.open {
			n.close(nd, e.conn)
		}
	}
	n.Run()
}
