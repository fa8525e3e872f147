package kvp2p

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/kvp2p/kvp2p/internal/datapath"
	"github.com/kvp2p/kvp2p/internal/engineapi"
	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/store"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// ErrClosed is returned by Manager calls after the node stopped.
var ErrClosed = errors.New("kvp2p: node closed")

// tickEvery is the loop's timer granularity: the resolution of every
// deadline the decision core keeps.
const tickEvery = 10 * time.Millisecond

// Node is one kvp2p instance. See the package doc.
type Node struct {
	cfg    Config
	timers loads.Timers
	log    *slog.Logger
	arena  []byte
	st     *store.Store
	tb     *loads.Table
	dpCfg  datapath.Config
	lim    wire.Limits
	eng    *engine // a sidecar's engine state (EngineConfig); nil otherwise

	events   chan event
	calls    chan func()
	stopReq  chan struct{} // Shutdown: drain, then stop
	quit     chan struct{} // Close: stop now
	done     chan struct{} // the loop exited
	quitOnce sync.Once
	stopOnce sync.Once
	wg       sync.WaitGroup // every goroutine but the loop

	// Owned by the loop; after it exited (done closed), by whoever holds
	// finalMu.
	ln          net.Listener
	conns       map[loads.ConnID]*ctlConn
	heldHellos  map[attachKey]loads.ConnID
	pendingData map[attachKey]pendingData
	open        map[uint64]JobResult // jobs submitted and not yet polled: a failed result each
	clk         loopClock            // the decisions' time: wall time less the loop's own lateness

	finalMu sync.Mutex // serializes PollFinished after the loop exited
}

type pendingData struct {
	nc net.Conn
	rd *wire.Reader
	at time.Time
}

// Events from goroutines to the loop.
type event interface{}

type evAccepted struct {
	nc    net.Conn
	rd    *wire.Reader
	first wire.Message
}
type evDialed struct {
	id        loads.ConnID
	ctl, data net.Conn
	err       error
}
type evCtlMsg struct {
	id  loads.ConnID
	msg wire.Message
}
type evCtlLost struct {
	id  loads.ConnID
	err error
}
type evData struct {
	id loads.ConnID
	ev datapath.Event
}

// NewNode validates cfg and builds a node; Serve runs it.
func NewNode(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if cfg.Incarnation == 0 {
		cfg.Incarnation = rand.Uint64() | 1
	}
	t := cfg.timers()
	pol, err := health.New(cfg.Policy, loads.PolicyOptions(t))
	if err != nil {
		return nil, err
	}
	var arena []byte
	var st *store.Store
	var eng *engine
	if cfg.Engine.Enabled() {
		// The engine owns the memory: slots are its region's chunks.
		eng = newEngine(cfg.Engine, cfg.Slots, cfg.BlockBytes)
		st, err = store.NewIndex(cfg.Slots, cfg.BlockBytes)
	} else {
		arena = make([]byte, cfg.Slots*cfg.BlockBytes)
		st, err = store.NewOn(arena, cfg.BlockBytes)
	}
	if err != nil {
		return nil, err
	}
	lc := loads.BuildConfig(loads.Identity{
		LocalID: cfg.PeerID, Incarnation: cfg.Incarnation, Domain: cfg.FailureDomain,
		BlockBytes: uint32(cfg.BlockBytes), Fingerprint: cfg.Fingerprint, HashSeed: cfg.HashSeed,
	}, t, pol)
	lc.Log = cfg.Log.With("node", cfg.PeerID)
	if eng != nil {
		lc.ExternalSlots, lc.Resolver = true, eng
	}
	tb, err := loads.New(lc, st)
	if err != nil {
		return nil, err
	}
	// The data connection's read timeout is a watchdog of its own: the vLLM
	// presets (watchdog off) must not get one, or comparisons would flatter them.
	readTimeout := t.HeartbeatTimeout
	if t.StallTimeout == 0 {
		readTimeout = -1
	}
	n := &Node{
		cfg: cfg, timers: t, log: lc.Log, arena: arena, st: st, tb: tb, lim: wire.DefaultLimits(),
		dpCfg: datapath.Config{
			BlockBytes: cfg.BlockBytes, ChunkBytes: min(cfg.ChunkBytes, cfg.BlockBytes),
			ProgressInterval:  t.ProgressInterval,
			KeepaliveInterval: t.HeartbeatInterval, ReadTimeout: readTimeout,
			WriteTimeout: t.HeartbeatTimeout, UserTimeout: t.HeartbeatTimeout,
		},
		events: make(chan event, 256), calls: make(chan func()),
		stopReq: make(chan struct{}), quit: make(chan struct{}), done: make(chan struct{}),
		conns: map[loads.ConnID]*ctlConn{}, heldHellos: map[attachKey]loads.ConnID{},
		pendingData: map[attachKey]pendingData{}, open: map[uint64]JobResult{},
		eng: eng,
	}
	if eng != nil {
		eng.srv = engineapi.New(engineBackend{n}, engineapi.Options{Log: n.log})
	}
	return n, nil
}

// Slot implements datapath.Memory over the arena; safe from any goroutine.
func (n *Node) Slot(i uint32) []byte {
	if n.eng != nil {
		if r := n.eng.mem.Load(); r != nil {
			return r.Chunk(i)
		}
		return nil
	}
	off := int(i) * n.cfg.BlockBytes
	end := off + n.cfg.BlockBytes
	return n.arena[off:end:end]
}

// PeerID is the node's advertised id.
func (n *Node) PeerID() string { return n.cfg.PeerID }

// Manager is the engine-facing API of this node.
func (n *Node) Manager() *Manager { return &Manager{n: n} }

// Serve runs the node on ln until Shutdown or Close, and returns nil then.
func (n *Node) Serve(ln net.Listener) error {
	n.ln = ln
	n.wg.Add(1)
	go n.acceptLoop(ln)
	n.loop()
	for _, c := range n.conns {
		if c.data != nil {
			<-c.data.Done() // its goroutines exit: their events find the loop gone
		}
	}
	n.wg.Wait()
	if n.eng != nil {
		n.eng.srv.Stop()
		n.eng.close()
	}
	// Nobody posts any more. Events queued before the loop exited may carry
	// sockets nobody owns yet: close them, or the peer waits on them.
	for {
		select {
		case ev := <-n.events:
			closeEventConns(ev)
		default:
			return nil
		}
	}
}

// closeEventConns closes the sockets an event hands over to the loop.
func closeEventConns(ev event) {
	switch ev := ev.(type) {
	case evAccepted:
		ev.nc.Close()
	case evDialed:
		if ev.err == nil {
			ev.ctl.Close()
			ev.data.Close()
		}
	}
}

// Shutdown drains: transfers in flight get the shutdown drain to finish,
// every peer gets a Goodbye, then the node stops. If ctx ends first the
// node is closed at once.
func (n *Node) Shutdown(ctx context.Context) error {
	n.stopOnce.Do(func() { close(n.stopReq) })
	select {
	case <-n.done:
		return nil
	case <-ctx.Done():
		n.Close()
		<-n.done
		return ctx.Err()
	}
}

// Close stops the node now: every connection is closed.
func (n *Node) Close() error {
	n.quitOnce.Do(func() { close(n.quit) })
	return nil
}

// post delivers an event to the loop unless it has exited; then the
// sockets the event carries are closed.
func (n *Node) post(ev event) {
	select {
	case n.events <- ev:
	case <-n.done:
		closeEventConns(ev)
	}
}

func (n *Node) acceptLoop(ln net.Listener) {
	defer n.wg.Done()
	for {
		nc, err := ln.Accept()
		if err != nil {
			return // the loop closed the listener
		}
		n.wg.Add(1)
		go n.readFirst(nc)
	}
}

// readFirst reads the first frame of an accepted connection: a Hello makes
// it a control connection, a DataAttach a data connection.
func (n *Node) readFirst(nc net.Conn) {
	defer n.wg.Done()
	rd := wire.NewReader(nc, n.lim)
	_ = nc.SetReadDeadline(time.Now().Add(n.timers.HandshakeTimeout))
	m, err := rd.Next()
	_ = nc.SetReadDeadline(time.Time{})
	if err != nil {
		nc.Close()
		return
	}
	n.post(evAccepted{nc: nc, rd: rd, first: m})
}

func (n *Node) dial(id loads.ConnID, peer string) {
	defer n.wg.Done()
	addr := n.cfg.Dial(peer)
	ctx, cancel := context.WithTimeout(context.Background(), n.timers.HandshakeTimeout)
	defer cancel()
	go func() {
		select {
		case <-n.quit:
			cancel()
		case <-ctx.Done():
		}
	}()
	var d net.Dialer
	ctl, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		n.post(evDialed{id: id, err: err})
		return
	}
	data, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		var b []byte
		b, err = wire.Append(nil, &wire.DataAttach{PeerID: n.cfg.PeerID, Incarnation: n.cfg.Incarnation})
		if err == nil {
			_ = data.SetWriteDeadline(time.Now().Add(n.timers.HandshakeTimeout))
			_, err = data.Write(b)
			_ = data.SetWriteDeadline(time.Time{})
		}
	}
	if err != nil {
		ctl.Close()
		if data != nil {
			data.Close()
		}
		n.post(evDialed{id: id, err: err})
		return
	}
	n.post(evDialed{id: id, ctl: ctl, data: data})
}

// readCtl is a control connection's reader goroutine.
func (n *Node) readCtl(id loads.ConnID, rd *wire.Reader) {
	defer n.wg.Done()
	for {
		m, err := rd.Next()
		if err != nil {
			n.post(evCtlLost{id: id, err: err})
			return
		}
		n.post(evCtlMsg{id: id, msg: m})
	}
}

func (n *Node) startData(c *ctlConn, nc net.Conn, rd *wire.Reader) {
	id := c.id
	dc, err := datapath.StartWithReader(nc, rd, n.dpCfg, n, func(ev datapath.Event) { n.post(evData{id: id, ev: ev}) })
	if err != nil {
		n.log.Error("data connection refused", "err", err)
		nc.Close()
		c.dataDone = true
		return
	}
	c.data = dc
}

func (n *Node) String() string { return fmt.Sprintf("kvp2p.Node(%s)", n.cfg.PeerID) }

// finalResults returns the results of a stopped node that were never
// polled: those its last loop iterations settled, then a failed result for
// every job that had none (Close does not wait for jobs to settle). Each
// job's result is returned once, as by PollFinished.
func (n *Node) finalResults() []JobResult {
	<-n.done
	n.finalMu.Lock()
	defer n.finalMu.Unlock()
	rs := n.tb.PollFinished()
	for _, r := range rs {
		delete(n.open, r.Job)
	}
	for _, r := range n.open {
		rs = append(rs, r)
	}
	clear(n.open)
	return rs
}

// FinalStats waits for the node to stop and returns its store's slot
// counts: what a stopped node still holds (filling or pinned) is leaked.
func (n *Node) FinalStats() (Stats, error) {
	<-n.done
	n.wg.Wait()
	st := n.st.Stats()
	return Stats{Free: st.Free, Filling: st.Filling, Ready: st.Ready, Pinned: st.Pinned}, n.st.Check()
}
