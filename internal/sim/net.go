package sim

import (
	"fmt"
	"time"

	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/store"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// Net is a deterministic discrete-event network of nodes' decision cores on
// a virtual clock. See the package doc for the model and its contract.
type Net struct {
	// Now is the virtual time; only the network moves it.
	Now time.Time
	// Tick is the timer granularity: nodes' Table.Tick runs on a grid of
	// Tick from the start.
	Tick time.Duration
	// IdleTick is the granularity for a node with nothing in flight (see
	// Node.Busy); zero means Tick. Its heartbeats and idle timers then run
	// up to IdleTick late, which no load can observe.
	IdleTick time.Duration
	// Latency is the one-way latency of every link (0: delivery at once).
	Latency time.Duration
	// Bandwidth is each node's outgoing data bandwidth in bytes per second
	// (0: unlimited).
	Bandwidth int64
	// ProgressInterval is how often a producer's writer sends a Progress
	// frame while a job is open (0: never).
	ProgressInterval time.Duration
	// WireBlockBytes is what one block costs on the wire, for transfer
	// times (0: the producer's store block size).
	WireBlockBytes int
	// OnResults, when set, receives every node's job results as the node
	// publishes them, instead of Node.Results.
	OnResults func(nd *Node, rs []loads.JobResult)
	// CheckTimers (tests): every table built from now on checks its timer
	// queues against a full scan on every tick; see TimerError.
	CheckTimers bool
	// FineAll ticks every node at Tick, busy or not (shutdown, tests).
	FineAll bool
	// TickEvery (tests) ticks each node at every grid point it is due a
	// tick at (every IdleTick, every Tick while busy), as the simulator
	// did before it skipped the ticks before a table's NextDeadline.
	TickEvery bool
	// CheckSkips (tests): at every grid point, every node left out of the
	// tick is checked to have nothing due and no effects waiting, and the
	// runner's slot count is checked against a walk over every node; see
	// SkipError.
	CheckSkips bool
	// Workers > 1 runs the Table.Tick calls of one grid point on that many
	// goroutines when there are many (each table is touched by one of
	// them; their actions are then performed in node order, so the run is
	// the same as with one worker).
	Workers int
	// VLLMTransport makes the network behave as vLLM's transport does
	// (the reference baselines' "vllm" timer set): a dial to an address
	// nobody listens on is not refused but retried silently every
	// ZMQReconnect, as a ZMQ DEALER does, until something listens or the
	// dialer's handshake deadline closes it; and a load that times out
	// faults its connection (vLLM #64251: the peer whose source WRITE
	// stalled is marked dead, which fails every load on its session).
	VLLMTransport bool
	// SendBuffer is how many bytes a node's kernel send buffer holds: a
	// small frame (Progress, Probe, ProbeAck) written behind queued block
	// bytes waits for up to that many of them to leave first (0: 4 MiB).
	SendBuffer int64
	// UserTimeout is TCP_USER_TIMEOUT on data connections: a data frame
	// held by a blackhole this long aborts its sender's connection at the
	// next retransmission (hold.go); 0: never. The runner sets the timer
	// set's heartbeat timeout, as the node does.
	UserTimeout time.Duration

	Dials  []Dial // every dial attempted, in order
	Events uint64 // events fired

	probeAcks  uint64 // probe answers delivered (tests)
	queuedAcks uint64 // probe answers that waited behind queued bytes (tests)
	ticks      uint64

	start    time.Time
	now      int64 // ns since start
	lastTick int64
	q        queue
	seq      uint64
	nodes    map[string]*Node
	order    []*Node // creation order: deterministic iteration
	hot      []*Node // nodes that may need a tick at Tick
	batch    []*Node // nodes to tick at the current grid point
	wakes    wakeHeap
	dirty    []*Node // nodes whose deadline may have changed (wake.go)
	watched  []*Node // nodes whose stores may hold slots (slots.go)
	nodeSeq  uint64
	skipErr  error
	lim      wire.Limits
	buf      []byte

	checked []*loads.Table // every table built while CheckTimers
}

// Dial records one outbound dial.
type Dial struct {
	From, To string
	At       time.Time
}

// NewNet returns an empty network whose clock starts at start: zero
// latency, unlimited bandwidth, Progress frames every 100 ms, 10 ms ticks.
func NewNet(start time.Time) *Net {
	return &Net{
		Now: start, start: start, Tick: 10 * time.Millisecond, ProgressInterval: 100 * time.Millisecond,
		nodes: map[string]*Node{}, lim: wire.DefaultLimits(),
	}
}

// Node is one kvp2p node in the network.
type Node struct {
	ID    string // advertised peer id (host:port)
	Rank  string // pod/rank, when the runner built it
	T     *loads.Table
	Store *store.Store
	// Results collects the node's job results (unless Net.OnResults is set).
	Results []loads.JobResult

	// Fault state. Tests may set the flags directly; Net's fault methods
	// set them with their side effects (resets, queued delivery).
	Crashed         bool          // process gone: dials refused, nothing in or out, no ticks
	Silent          bool          // blackhole: nothing in or out, connections stay open, dials hang
	DataBlackhole   bool          // data path silently drops everything, both directions
	RefuseHandshake bool          // Hellos to and from it are refused as incompatible
	SlowBps         int64         // outgoing data limited to this many bytes per second
	ExtraDelay      time.Duration // added to every message and data frame to or from it
	// HelloDelay: its process answers a connection's Hello this late (a
	// sidecar starved of CPU: its kernel accepts at once, its handshake
	// waits). Messages behind the Hello on that connection wait with it.
	HelloDelay time.Duration
	// Busy says the node's engine has work in flight: the node ticks at
	// Tick even if the network sees nothing in flight on it.
	Busy bool

	net      *Net
	opts     NodeOpts
	ends     ends
	stalled  bool
	held     []event // what reached it while stalled, in order
	gone     bool    // replaced: events to it are dropped
	inHot    bool
	seq      uint64 // creation order (n.order is sorted by it)
	wake     int64  // its table's next deadline, while in n.wakes
	wi       int    // index in n.wakes + 1; 0: not in it
	isDirty  bool
	watch    bool
	work     int    // data jobs and handshakes in flight on its ends
	active   []*end // connections with data queued on its link, in turn (link.go)
	turn     int    // the next of them to send
	linkBusy bool   // a piece is on the link
	lastTick int64
}

// Stalled reports whether the node's process is paused (see Net.Stall).
func (nd *Node) Stalled() bool { return nd.stalled }

// Opts returns the options the node was built with.
func (nd *Node) Opts() NodeOpts { return nd.opts }

// end is one side of a connection.
type end struct {
	node      *Node
	conn      loads.ConnID
	ref       loads.ConnRef // conn's handle in node.T: delivery skips the lookup by id
	peer      *end
	open      bool // this side's socket is open
	pending   bool // handshake in flight (counted in node.work)
	greeted   uint8
	ctlFloor  int64   // FIFO: no message from this end arrives before this
	dataFloor int64   // same for data frames
	pieces    []piece // data queued on its node's link (link.go)
	queuedNs  int64   // their transfer time
	rx        map[uint64]*rxJob
	tx        map[uint64]*txJob
	// Data frames a blackhole refused, kept by the kernel until a
	// retransmission gets them through (hold.go), aimed at peer.
	held      []event
	heldSince int64  // the first refused send
	rtoK      uint   // retransmissions armed since
	heldGen   uint64 // bumped when held is emptied: stale retransmissions do nothing
}

type rxJob struct {
	slots []store.Slot
	got   uint64 // bytes landed, in the consumer's store units
}

type txJob struct {
	job   uint64
	from  *end
	ended bool
	bytes uint64 // sent so far, in store units
	// blocks: it was given blocks to send (a parked fetch, waiting for
	// its prefill, has none: its Progress frames are not Queued).
	blocks bool
}

func (n *Net) newEnd(nd *Node, conn loads.ConnID) *end {
	e := &end{node: nd, conn: conn, ref: nd.T.Ref(conn), open: true, pending: true}
	nd.ends.put(conn, e)
	nd.work++
	n.wake(nd)
	return e
}

// drop forgets everything in flight on e (it closed or its node died).
func (e *end) drop() {
	w := len(e.rx) + len(e.tx)
	if e.pending {
		w++
		e.pending = false
	}
	e.node.work -= w
	for _, t := range e.tx {
		t.ended = true
	}
	e.rx, e.tx = nil, nil
	e.held = nil
	e.heldGen++
	e.pieces, e.queuedNs = nil, 0 // the link skips it
	e.ref = loads.ConnRef{}       // closed: nothing is delivered to it, and its session may go
}

// Add registers a node built by the caller around its table and store.
func (n *Net) Add(id string, t *loads.Table, st *store.Store) *Node {
	n.nodeSeq++
	nd := &Node{ID: id, T: t, Store: st, net: n, seq: n.nodeSeq}
	n.nodes[id] = nd
	n.order = append(n.order, nd)
	n.touch(nd)
	return nd
}

// Node returns the node with id, or nil.
func (n *Net) Node(id string) *Node { return n.nodes[id] }

// Nodes returns every live node in creation order.
func (n *Net) Nodes() []*Node { return n.order }

func (n *Net) off(t time.Time) int64 { return int64(t.Sub(n.start)) }

func (n *Net) setNow(t int64) {
	if t != n.now {
		n.now = t
		n.Now = n.start.Add(time.Duration(t))
	}
}

// At runs fn at virtual time t (at once, in order, if t is not after Now).
func (n *Net) At(t time.Time, fn func()) {
	n.schedule(max(n.off(t), n.now), event{kind: evFunc, fn: fn})
}

func (n *Net) schedule(at int64, ev event) {
	ev.at = at
	n.seq++
	ev.seq = n.seq
	n.q.push(ev)
}

// Run performs every node's pending actions and every event due by Now.
func (n *Net) Run() {
	n.flushAll()
	n.runUntil(n.now)
}

// Advance moves the clock by d, firing events in time order and ticking
// nodes on the Tick grid.
func (n *Net) Advance(d time.Duration) {
	n.flushAll()
	n.advance(d)
}

func (n *Net) advance(d time.Duration) {
	target := n.now + int64(d)
	for {
		tt := n.lastTick + int64(n.Tick)
		if tt > target {
			n.runUntil(target)
			n.setNow(target)
			return
		}
		n.runUntil(tt)
		n.setNow(tt)
		n.lastTick = tt
		n.tickAll(tt)
		n.runUntil(tt)
	}
}

func (n *Net) runUntil(t int64) {
	for len(n.q) > 0 && n.q[0].at <= t {
		ev := n.q.pop()
		n.setNow(ev.at)
		n.Events++
		n.fire(ev)
	}
}

// Flush carries out a node's effects: its actions, then its results; call
// it after calling the node's table directly.
func (n *Net) Flush(nd *Node) {
	n.touch(nd)
	eff := nd.T.TakeEffects()
	if nd.Crashed || nd.gone {
		return
	}
	acts := eff.Actions
	for i := range acts {
		n.act(nd, &acts[i])
	}
	nd.T.ReuseActions(acts) // act keeps no pointer into them (copyMsg copies)
	if rs := eff.Results; len(rs) > 0 {
		if n.VLLMTransport {
			n.faultStalled(nd, rs)
		}
		if n.OnResults != nil {
			n.OnResults(nd, rs)
		} else {
			nd.Results = append(nd.Results, rs...)
		}
	}
}

func (n *Net) flushAll() {
	for _, nd := range n.order {
		n.Flush(nd)
	}
}

func (n *Net) lat(a, b *Node) int64 {
	return int64(n.Latency + a.ExtraDelay + b.ExtraDelay)
}

func (n *Net) copyMsg(m wire.Message) wire.Message {
	b, err := wire.Append(n.buf[:0], m)
	if err != nil {
		panic(fmt.Sprintf("sim: encode %T: %v", m, err))
	}
	n.buf = b
	out, err := wire.Decode(wire.Type(b[5]), b[6:], n.lim)
	if err != nil {
		panic(fmt.Sprintf("sim: decode %T: %v", m, err))
	}
	return out
}

func (n *Net) act(nd *Node, a *loads.Action) {
	switch a.Kind {
	case loads.ActDial:
		n.dial(nd, a.Conn, a.Peer)
	case loads.ActSend:
		e := nd.ends.get(a.Conn)
		if e == nil || !e.open || e.peer == nil {
			return
		}
		n.send(e, n.copyMsg(a.Msg))
	case loads.ActData:
		n.data(nd, a.Conn, &a.Op)
	case loads.ActClose:
		n.close(nd, a.Conn)
	}
}

// send puts m on the wire from e to its peer (FIFO per direction).
func (n *Net) send(e *end, m wire.Message) {
	p := e.peer
	if e.node.Silent || p.node.Silent {
		return // the blackhole swallows it
	}
	at := max(n.now+n.lat(e.node, p.node), e.ctlFloor)
	if _, ok := m.(*wire.Hello); ok {
		at += int64(p.node.HelloDelay)
	}
	e.ctlFloor = at
	n.schedule(at, event{kind: evMsg, e: p, msg: m})
}

// reset tells e's side, after d, that its connection is gone (EOF/RST),
// unless a blackhole eats the news.
func (n *Net) reset(e *end, d int64) {
	if e == nil || !e.open || e.node.Silent {
		return
	}
	if p := e.peer; p != nil && p.node.Silent && d > 0 {
		return
	}
	n.schedule(n.now+d, event{kind: evLost, e: e})
}

func (n *Net) dial(nd *Node, conn loads.ConnID, peer string) {
	n.Dials = append(n.Dials, Dial{From: nd.ID, To: peer, At: n.Now})
	me := n.newEnd(nd, conn)
	t := n.nodes[peer]
	switch {
	case (t == nil || t.Crashed) && n.VLLMTransport:
		n.schedule(n.now+int64(ZMQReconnect), event{kind: evFunc, fn: func() { n.redial(me, peer) }})
	case t == nil || t.Crashed:
		d := 2 * n.Latency
		if t != nil {
			d = time.Duration(2 * n.lat(nd, t))
		}
		n.schedule(n.now+int64(d), event{kind: evRefused, e: me})
	case nd.Silent || t.Silent:
		// The SYN goes nowhere; TCP retransmits it (see accept).
		n.schedule(n.now+int64(time.Second), event{kind: evAccept, e: me, nd: t, n: 1})
	default:
		n.schedule(n.now+n.lat(nd, t), event{kind: evAccept, e: me, nd: t})
	}
}

func (n *Net) close(nd *Node, conn loads.ConnID) {
	n.schedule(n.now, event{kind: evClosed, nd: nd, conn: conn})
	e := nd.ends.get(conn)
	if e == nil {
		return
	}
	nd.ends.del(conn)
	was := e.open
	e.open = false
	e.drop()
	if was && e.peer != nil && !nd.Silent {
		n.reset(e.peer, n.lat(nd, e.peer.node))
	}
}
