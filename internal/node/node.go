package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/kvp2p/kvp2p/internal/datapath"
	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/identity"
	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/ratelog"
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
	sc     EngineHooks // an engine sidecar's hooks (internal/sidecar); nil: the node's own arena
	find   *finder     // summaries (find.go); nil unless Config.Find.Enabled
	obs    *observer   // counts for metrics and status; owned by the loop

	// testDialHeld, when set (tests only), runs in a dial goroutine right
	// after its connect returned: a goroutine starved of CPU.
	testDialHeld func()

	// lim bounds control connections' frames, dataLim a data connection's,
	// and frameMem the memory that
	// control connections' large frames hold between them (frames.go).
	dataLim  wire.Limits
	frameMem *wire.Budget

	events chan event
	calls  chan call
	// callDone holds Manager.do's reply channels (chan struct{}, cap 1)
	// for reuse. A free list of the node's own, not a sync.Pool field: the
	// runtime keeps every used Pool on a global list until the second GC
	// after its last use, and an interior pointer to a field keeps the
	// whole Node, arena included, alive that long (issue 14: each demo
	// run's fleet outlived it by a GC cycle, gigabytes at 40 requests/s).
	callDone chan chan struct{}
	stopReq  chan struct{} // Shutdown: drain, then stop
	quit     chan struct{} // Close: stop now
	done     chan struct{} // the loop exited
	// settled has a token when the loop settled results since the last
	// WaitFinished woke (capacity 1: the loop never blocks on it).
	settled  chan struct{}
	quitOnce sync.Once
	stopOnce sync.Once
	wg       sync.WaitGroup // every goroutine but the loop

	// Owned by the loop; after it exited (done closed), by whoever holds
	// finalMu.
	ln          net.Listener
	lnClosed    bool // the loop closed ln: an Accept error then is no news
	serveErr    error
	conns       map[loads.ConnID]*ctlConn
	dialing     map[loads.ConnID]pendingDial // dials whose connect no one reported yet (checkDials)
	pathsAt     time.Time                    // checkPaths last asked the kernel
	heldHellos  map[pairKey]evAccepted       // inbound Hellos waiting for their data connection
	pendingData map[pairKey]pendingData
	open        map[uint64]JobResult // jobs submitted and not yet polled: a failed result each
	results     []JobResult          // settled by the table, not yet polled (takeResults)
	clk         loopClock            // the decisions' time: wall time less the loop's own lateness
	waiters     []*lookupWaiter      // LookupWait callers whose verdict is still RETRY

	tls      *identity.Creds // nil: plain TCP
	gate     *connGate       // accepted connections that are not a session yet
	refused  refusals        // connections refused before they became sessions
	sendq    sendQueues      // control send queues' bytes by source
	ranks    rankHosts       // hosts with ranks in view (trust.go); the loop's
	refusing bool            // RefuseHandshakes: every Hello is refused as incompatible

	finalMu sync.Mutex // serializes PollFinished after the loop exited
}

type pendingData struct {
	nc    net.Conn
	raw   net.Conn // as accepted (nc may wrap it in TLS): the gate's key
	rd    *wire.Reader
	ident identity.Peer
	at    time.Time
}

// Events from goroutines to the loop.
type event interface{}

type evAccepted struct {
	nc    net.Conn
	raw   net.Conn // as accepted: the gate's key
	rd    *wire.Reader
	first wire.Message
	ident identity.Peer
	at    time.Time // when the loop parked it (heldHellos)
	// From the accept to the first frame read (TLS included), and when it
	// was posted: logged at debug (see evDialed).
	firstAfter time.Duration
	posted     time.Time
}
type evAcceptStopped struct{ err error }
type evDialed struct {
	id        loads.ConnID
	ctl, data net.Conn
	err       error
	refused   bool // the control connection's connect was refused: nobody listens
	// How long the dial goroutine took, from its start, to connect the
	// control connection (and TLS) and then the data connection with its
	// attach; and when it posted this. Logged at debug: a slow handshake
	// is told apart from a slow peer and from this node's own late loop.
	ctlTook, dataTook time.Duration
	posted            time.Time
}

// evDialAnswered: a dial's control connection connected (the peer's kernel
// answered the SYN); TLS, the data connection and the attach may follow.
type evDialAnswered struct{ id loads.ConnID }
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

// New validates cfg and builds a node with its own arena; Serve runs
// it. An engine sidecar's node is built by the sidecar (NewWithSidecar).
func New(cfg Config) (*Node, error) { return newNode(cfg, nil) }

// NewWithSidecar validates cfg and builds a node whose slots are sc's (an
// engine's region): the store only indexes them, and peers' lookups of
// keys it does not hold go to sc (loads.Resolver).
func NewWithSidecar(cfg Config, sc EngineHooks) (*Node, error) {
	if sc == nil {
		return nil, errors.New("kvp2p: NewWithSidecar without a sidecar")
	}
	return newNode(cfg, sc)
}

func newNode(cfg Config, sc EngineHooks) (*Node, error) {
	mem := physicalMemory()
	if sc != nil {
		mem = 0 // the engine's region is the engine's memory (ValidateWithSidecar)
	}
	if err := cfg.validate(mem); err != nil {
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
	if sc != nil {
		// The engine owns the memory: slots are its region's chunks.
		st, err = store.NewIndex(cfg.Slots, cfg.BlockBytes)
	} else {
		arena = make([]byte, cfg.Slots*cfg.BlockBytes)
		st, err = store.NewOn(arena, cfg.BlockBytes)
		if err == nil {
			// Put sums each chunk-sized piece once, and loads send those
			// sums (store/sums.go): one piece per chunk, as dpCfg says.
			err = st.SetSumPiece(min(cfg.ChunkBytes, cfg.BlockBytes))
		}
	}
	if err != nil {
		return nil, err
	}
	lc := loads.BuildConfig(loads.Identity{
		LocalID: cfg.PeerID, Incarnation: cfg.Incarnation, Domain: cfg.FailureDomain,
		BlockBytes: uint32(cfg.BlockBytes), Fingerprint: cfg.Fingerprint, HashSeed: cfg.HashSeed,
	}, t, pol)
	// What peers can make the node log repeats at most a few times per
	// window, then as a count.
	lc.Log = slog.New(ratelog.New(cfg.Log.Handler(), 0, 0)).With("node", cfg.PeerID)
	if sc != nil {
		lc.ExternalSlots, lc.Resolver = true, sc
	}
	obs := newObserver(time.Now())
	lc.Observer = obs
	// A Hello never replaces a live session on its word, under TLS too (a
	// certificate proves who may speak for the peer, not that its live
	// session is dead): a newcomer that would replace a ready session waits
	// while that session is probed, at most as long as a silent peer would
	// take to be declared dead (loads/hold.go).
	lc.ProbeBeforeReplace = t.HeartbeatTimeout
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
		cfg: cfg, timers: t, log: lc.Log, arena: arena, st: st, tb: tb,
		lim: controlLimits(), dataLim: dataLimits(), frameMem: wire.NewBudget(cfg.Limits.MaxFrameMemory),
		dpCfg: datapath.Config{
			Limits:     dataLimits(),
			BlockBytes: cfg.BlockBytes, ChunkBytes: min(cfg.ChunkBytes, cfg.BlockBytes),
			SumPiece:          st.SumPiece(),
			ProgressInterval:  t.ProgressInterval,
			KeepaliveInterval: t.HeartbeatInterval, ReadTimeout: readTimeout,
			WriteTimeout: t.HeartbeatTimeout, UserTimeout: t.HeartbeatTimeout,
		},
		events: make(chan event, 256), calls: make(chan call), callDone: make(chan chan struct{}, callDoneFree),
		stopReq: make(chan struct{}), quit: make(chan struct{}), done: make(chan struct{}),
		settled: make(chan struct{}, 1),
		conns:   map[loads.ConnID]*ctlConn{}, dialing: map[loads.ConnID]pendingDial{}, heldHellos: map[pairKey]evAccepted{},
		pendingData: map[pairKey]pendingData{}, open: map[uint64]JobResult{},
		sc: sc, obs: obs, gate: newConnGate(cfg.Limits.MaxHandshakes, cfg.Limits.MaxHandshakesPerSource),
	}
	if cfg.TLS.Enabled() {
		if n.tls, err = identity.NewCreds(identity.Config(cfg.TLS)); err != nil {
			return nil, err
		}
	}
	if cfg.Find.Enabled {
		if n.find, err = newFinder(cfg, sc == nil); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// Slot implements datapath.Memory over the arena; safe from any goroutine.
func (n *Node) Slot(i uint32) []byte {
	if n.sc != nil {
		return n.sc.Slot(i)
	}
	off := int(i) * n.cfg.BlockBytes
	end := off + n.cfg.BlockBytes
	return n.arena[off:end:end]
}

// SlotSums is slot i's sum storage (store.SlotSums), for the data path to
// record the sums of a load's chunks as they are checked; nil for an
// engine's region, which the engine may rewrite after the load (its blocks
// are summed as they are sent).
func (n *Node) SlotSums(i uint32) []uint32 {
	if n.sc != nil {
		return nil
	}
	return n.st.SlotSums(store.Slot(i))
}

// PeerID is the node's advertised id.
func (n *Node) PeerID() string { return n.cfg.PeerID }

// Manager is the engine-facing API of this node.
func (n *Node) Manager() *Manager { return &Manager{n: n} }

// Serve runs the node on ln until Shutdown or Close, and returns nil then;
// it returns an error if the listener fails for good (the node stopped).
func (n *Node) Serve(ln net.Listener) error {
	n.ln = ln
	n.logTrust()
	n.wg.Add(1)
	go n.acceptLoop(ln)
	if n.find != nil && len(n.find.dns) > 0 {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			resolveLoop(n.find.cfg.Resolver, n.find.dns, n.find.cfg.DNSInterval, n.done, func(ev evResolved) { n.post(ev) })
		}()
	}
	n.loop()
	for _, c := range n.conns {
		if c.data != nil {
			<-c.data.Done() // its goroutines exit: their events find the loop gone
		}
	}
	n.wg.Wait()
	if n.sc != nil {
		n.sc.Stop()
	}
	// Nobody posts any more. Events queued before the loop exited may carry
	// sockets nobody owns yet: close them, or the peer waits on them.
	for {
		select {
		case ev := <-n.events:
			closeEventConns(ev)
		default:
			return n.serveErr
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

// acceptLoop accepts until the listener closes. Temporary errors (EMFILE,
// ENFILE, ECONNABORTED) back off and retry as net/http does, logged once
// per burst with a count; any other error stops the node (Serve returns
// it, and the process exits non-zero).
func (n *Node) acceptLoop(ln net.Listener) {
	defer n.wg.Done()
	var delay time.Duration
	failures := 0
	for {
		nc, err := ln.Accept()
		if err != nil {
			var te interface{ Temporary() bool }
			if errors.As(err, &te) && te.Temporary() && !errors.Is(err, net.ErrClosed) {
				if failures == 0 {
					n.log.Error("accept failing, retrying", "err", err)
				}
				failures++
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(delay):
					continue
				case <-n.done:
					return
				}
			}
			n.post(evAcceptStopped{err})
			return
		}
		if failures > 0 {
			n.log.Warn("accepting again", "failed_accepts", failures)
			failures, delay = 0, 0
		}
		r := n.gate.enter(nc, time.Now())
		n.refused.gate.Add(n.gate.takeEvicted())
		switch r {
		case gateOK:
			n.wg.Add(1)
			go n.readFirst(nc)
		case gateClosed:
			nc.Close()
		default:
			// Logged at debug: an attacker must not be able to fill the disk.
			n.refused.gate.Add(1)
			n.log.Debug("refusing connection: too many unfinished handshakes", "src", nc.RemoteAddr())
			nc.Close()
		}
	}
}

// firstFrameLimits bound the one frame read before a peer is known: a
// Hello or a DataAttach, nothing bigger.
func firstFrameLimits(l wire.Limits) wire.Limits {
	l.MaxFrame, l.MaxString, l.MaxKeys = 4<<10, 512, 0
	return l
}

// readFirst runs the TLS handshake if configured and reads the first frame
// of an accepted connection, all within the handshake timeout: a Hello
// makes it a control connection, a DataAttach a data connection. The peer
// id either claims must be one the connection may speak for (identity.CheckClaim).
func (n *Node) readFirst(raw net.Conn) {
	defer n.wg.Done()
	nc := raw
	start := time.Now()
	fail := func(what string, err error) {
		n.log.Debug("refusing connection", "src", raw.RemoteAddr(), "at", what, "err", err)
		n.gate.leave(raw)
		raw.Close()
	}
	deadline := time.Now().Add(n.timers.HandshakeTimeout)
	_ = raw.SetDeadline(deadline)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var ident identity.Peer
	var co *identity.Coalescer
	if n.tls != nil {
		if err := n.tls.MaybeReload(time.Now()); err != nil {
			n.log.Warn("tls reload failed, keeping the old certificate", "err", err)
		}
		co = &identity.Coalescer{Conn: raw}
		tc := tls.Server(co, n.tls.ServerConfig())
		if err := tc.HandshakeContext(ctx); err != nil {
			n.refused.tls.Add(1)
			fail("tls handshake", err)
			return
		}
		ident = identity.Of(tc.ConnectionState())
		nc = tc
	}
	secure := nc // what proves the peer's identity (identity.CheckClaim)
	if co != nil {
		nc = &identity.CoalescedTLS{Conn: nc.(*tls.Conn), Co: co}
	}
	if n.cfg.WrapAccepted != nil {
		nc = n.cfg.WrapAccepted(nc)
	}
	rd := wire.NewReader(nc, firstFrameLimits(n.lim))
	m, err := rd.Next()
	if err != nil {
		n.refused.frame.Add(1)
		fail("first frame", err)
		return
	}
	n.gate.spoke(raw) // no longer silent: newcomers do not evict it
	var claim string
	switch m := m.(type) {
	case *wire.Hello:
		if m.Secret == ([wire.SecretSize]byte{}) {
			// A dialer's Hello always carries its attempt's secret: without
			// one, anybody could attach its data connection.
			n.refused.frame.Add(1)
			fail("first frame", errors.New("hello without an attach secret"))
			return
		}
		claim = m.PeerID
	case *wire.DataAttach:
		claim = m.PeerID
	default:
		n.refused.frame.Add(1)
		fail("first frame", fmt.Errorf("unexpected %v frame", m.Type()))
		return
	}
	if err := identity.CheckClaim(ctx, secure, claim, n.cfg.TrustClaimedHost); err != nil {
		n.refused.identity.Add(1)
		fail("identity", err)
		return
	}
	_ = raw.SetDeadline(time.Time{})
	n.sessionLimits(rd, m)
	n.post(evAccepted{nc: nc, raw: raw, rd: rd, first: m, ident: ident, firstAfter: time.Since(start), posted: time.Now()})
}

// ReloadTLS reads the TLS files again (SIGHUP); a no-op without TLS. New
// connections use the new certificate; established ones keep theirs.
func (n *Node) ReloadTLS() error {
	if n.tls == nil {
		return nil
	}
	return n.tls.Reload()
}

// handshakeTLS secures an outbound connection to peer; the server's
// certificate must name the peer id's host.
func (n *Node) handshakeTLS(ctx context.Context, nc net.Conn, peer string) (net.Conn, error) {
	if n.tls == nil {
		return nc, nil
	}
	if err := n.tls.MaybeReload(time.Now()); err != nil {
		n.log.Warn("tls reload failed, keeping the old certificate", "err", err)
	}
	co := &identity.Coalescer{Conn: nc}
	tc := tls.Client(co, n.tls.ClientConfig(peer))
	if err := tc.HandshakeContext(ctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("tls: %w", err)
	}
	return &identity.CoalescedTLS{Conn: tc, Co: co}, nil
}

func (n *Node) dial(id loads.ConnID, peer string, secret [wire.SecretSize]byte, probe *dialProbe) {
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
	d := net.Dialer{Control: probe.control}
	start := time.Now()
	ctl, err := d.DialContext(ctx, "tcp", addr)
	probe.done(err == nil)
	d.Control = nil // the data connection needs no probe
	if n.testDialHeld != nil {
		n.testDialHeld() // tests: this goroutine starved of CPU after its connect
	}
	if err != nil {
		// Refused (RST to the SYN) is the one failure that says the
		// process is gone; a timeout or a TLS failure does not.
		n.post(evDialed{id: id, err: err, refused: dialRefused(err)})
		return
	}
	n.post(evDialAnswered{id: id}) // before evDialed: one goroutine posts both, in order
	ctl, err = n.handshakeTLS(ctx, ctl, peer)
	if err != nil {
		n.post(evDialed{id: id, err: err})
		return
	}
	ctlTook := time.Since(start)
	data, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		data, err = n.handshakeTLS(ctx, data, peer)
	}
	if err == nil {
		var b []byte
		b, err = wire.Append(nil, &wire.DataAttach{PeerID: n.cfg.PeerID, Incarnation: n.cfg.Incarnation, Attempt: uint64(id),
			MAC: wire.AttachMAC(secret, n.cfg.PeerID, n.cfg.Incarnation, uint64(id))})
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
	n.post(evDialed{id: id, ctl: ctl, data: data, ctlTook: ctlTook, dataTook: time.Since(start), posted: time.Now()})
}

// dialRefused reports whether a connect failed because nothing listens
// at the address (the peer answered the SYN with a RST): its process is
// gone, where a timeout or an unreachable network says nothing of it.
func dialRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// readCtl is a control connection's reader goroutine.
// Its pace is bounded (ctlRate): one peer's flood of small messages then
// costs the loop a bounded share, TCP pushes back on the sender, and the
// other peers' messages still get their turn.
func (n *Node) readCtl(id loads.ConnID, rd *wire.Reader) {
	defer n.wg.Done()
	defer rd.Release() // its share of frameMem
	b := msgBucket{tokens: ctlBurst, last: time.Now()}
	for {
		m, err := rd.Next()
		if err != nil {
			n.post(evCtlLost{id: id, err: err})
			return
		}
		if wait := b.take(time.Now()); wait > 0 {
			select {
			case <-time.After(wait):
			case <-n.done:
				return
			}
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
		n.moveCtl(c, ctlDataDown)
		return
	}
	c.data, c.dataNC = dc, nc
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
	n.results = append(n.results, n.tb.TakeEffects().Results...)
	rs := n.takeResults()
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
