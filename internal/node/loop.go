package node

import (
	cryptorand "crypto/rand"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/kvp2p/kvp2p/internal/datapath"
	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/store"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// loop is the one goroutine that owns the node's decision state: it feeds
// the table events and the clock, and performs the actions it returns.
func (n *Node) loop() {
	tick := time.NewTicker(tickEvery)
	defer tick.Stop()
	defer close(n.done)
	stopReq := n.stopReq
	for {
		select {
		case ev := <-n.events:
			n.handle(ev)
		case c := <-n.calls:
			now := n.clk.now(time.Now())
			n.checkDials(now) // before the call's lookups judge a pending dial
			c.f(now)
			if c.done != nil {
				c.done <- struct{}{}
			}
		case <-tick.C:
			now := n.clk.tick(time.Now())
			if d := n.clk.takeStarved(); d > 0 {
				now = n.caughtUp(d)
			}
			n.checkDials(now)
			n.checkPaths(now)
			n.tb.Tick(now)
			n.findTick(now)
			n.expirePending(now)
			n.expireDataLoss(now)
			if n.sc != nil {
				n.sc.Tick(n, now)
			}
		case <-stopReq:
			stopReq = nil // handled once
			n.lnClosed = true
			n.ln.Close()
			n.tb.Shutdown(n.clk.now(time.Now()))
		case <-n.quit:
			n.closeAll()
			return
		}
		n.perform()
		if n.sc != nil {
			n.sc.AfterTurn(n, n.clk.now(time.Now()))
			n.perform()
		}
		n.answerWaiters()
		if stopReq == nil && n.tb.Drained() && len(n.conns) == 0 {
			n.closeAll()
			return
		}
	}
}

// caughtUp is the late tick's prelude (the loop could not run for d beyond
// what its clock excluded): the events queued meanwhile are handled first,
// so that progress that arrived during the starvation counts before the
// watchdog is judged (select picks among ready cases at random), and the
// data-path deadlines move d later (loads.Table.Starved). It returns the
// clock's reading for the tick.
func (n *Node) caughtUp(d time.Duration) time.Time {
	for range len(n.events) { // only those queued before the tick: the loop stays responsive
		n.handle(<-n.events)
		n.perform()
	}
	n.tb.Starved(d)
	return n.clk.now(time.Now())
}

// closeAll closes the listener and every socket; the goroutines end on
// their own I/O errors, and the loop no longer listens to their events.
func (n *Node) closeAll() {
	n.lnClosed = true
	n.ln.Close()
	n.gate.closeAll() // connections in their handshake: pendingData and heldHellos too
	for _, c := range n.conns {
		if c.nc != nil {
			c.nc.Close()
		}
		if c.w != nil {
			c.w.close()
		}
		if c.data != nil {
			c.data.Close()
		}
	}
	for _, p := range n.pendingData {
		p.nc.Close()
	}
	for _, h := range n.heldHellos {
		h.nc.Close()
	}
}

func (n *Node) handle(ev event) {
	now := n.clk.now(time.Now())
	switch ev := ev.(type) {
	case evAccepted:
		n.accepted(now, ev)
	case evDialAnswered:
		delete(n.dialing, ev.id)
		n.tb.DialAnswered(now, ev.id)
	case evDialed:
		delete(n.dialing, ev.id)
		c := n.conns[ev.id]
		if c == nil || c.closing() {
			if ev.err == nil {
				ev.ctl.Close()
				ev.data.Close()
			}
			if c != nil {
				n.dataClosed(now, c)
			}
			return
		}
		if ev.err != nil {
			n.log.Info("dial failed", "peer", c.key.peer, "err", ev.err)
			n.moveCtl(c, ctlDataDown) // there is no data connection
			if ev.refused {
				n.tb.DialRefused(now, ev.id)
			} else {
				n.tb.ConnLost(now, ev.id)
			}
			return
		}
		n.log.Debug("connect attempt dialed", "peer", c.key.peer, "conn", ev.id, "control", ev.ctlTook, "control_and_data", ev.dataTook,
			"loop_late", time.Since(ev.posted))
		c.nc = ev.ctl
		// A connection we dialed has a share of its own: the source shares
		// bound what a host's many sessions to us make us queue, and our
		// own dials to several ranks of one host are not that.
		c.w = newMsgWriter(ev.ctl, n.timers.HeartbeatTimeout, nil, &n.wg)
		n.wg.Add(1)
		go n.readCtl(c.id, n.ctlReader(ev.ctl))
		n.startData(c, ev.data, nil)
		n.tb.Connected(now, ev.id)
	case evCtlMsg:
		c := n.conns[ev.id]
		if c == nil || c.closing() {
			return
		}
		n.obs.received(now, ev.id, ev.msg)
		switch m := ev.msg.(type) {
		case *wire.Hello:
			n.noteRank(m.PeerID)
		case *wire.Summary:
			n.findReceive(now, ev.id, m) // the node's, not the session's
			return
		}
		n.tb.Receive(now, ev.id, n.helloIn(ev.msg))
	case evCtlLost:
		if c := n.conns[ev.id]; c != nil && !c.closing() {
			n.tb.ConnLost(now, ev.id)
		}
	case evData:
		n.dataEvent(now, ev)
	case evResolved:
		if n.find != nil {
			n.findResolved(now, ev)
		}
	case evAcceptStopped:
		if !n.lnClosed {
			n.log.Error("accepting stopped for good: stopping the node", "err", ev.err)
			n.serveErr = fmt.Errorf("kvp2p: accept: %w", ev.err)
			n.Close()
		}
	}
}

// accepted pairs a new inbound connection with its other half: a session
// starts (and takes a place among max_peers) only once both its Hello and
// its DataAttach arrived, from connections with the same identity, the
// DataAttach carrying the MAC of the Hello's secret (pairKey); until then
// both wait in the gate, bounded and expired by the handshake timeout.
func (n *Node) accepted(now time.Time, ev evAccepted) {
	n.log.Debug("accepted connection's first frame", "src", ev.raw.RemoteAddr(), "type", ev.first.Type(), "after", ev.firstAfter,
		"loop_late", time.Since(ev.posted))
	if n.gate.evicted(ev.raw) { // to make room, since its first frame
		n.dropConn(ev.nc, ev.raw)
		return
	}
	switch m := ev.first.(type) {
	case *wire.Hello:
		key := helloPairKey(m)
		if p, ok := n.pendingData[key]; ok && p.ident == ev.ident {
			delete(n.pendingData, key)
			n.admit(now, ev, m, p)
			return
		}
		if _, dup := n.heldHellos[key]; dup {
			// The same secret twice: a replay, never the dialer (one Hello
			// per attempt). The first stays; the copy is dropped.
			n.dropConn(ev.nc, ev.raw)
			return
		}
		ev.at = now
		n.heldHellos[key] = ev
	case *wire.DataAttach:
		key := attachPairKey(m)
		p := pendingData{nc: ev.nc, raw: ev.raw, rd: ev.rd, ident: ev.ident, at: now}
		if h, ok := n.heldHellos[key]; ok && h.ident == ev.ident {
			delete(n.heldHellos, key)
			n.admit(now, h, h.first.(*wire.Hello), p)
			return
		}
		if _, dup := n.pendingData[key]; dup {
			// As for Hellos: a second attach never displaces the first.
			n.dropConn(ev.nc, ev.raw)
			return
		}
		n.pendingData[key] = p
	default: // readFirst lets nothing else through
		n.dropConn(ev.nc, ev.raw)
	}
}

// admit makes a session of a Hello and its data connection.
func (n *Node) admit(now time.Time, ctl evAccepted, h *wire.Hello, data pendingData) {
	n.gate.handshook(ctl.raw, time.Now()) // its source gets the gate's reserved share
	n.gate.leave(ctl.raw)
	n.gate.leave(data.raw)
	id := n.tb.Accept(now)
	c := &ctlConn{id: id, nc: ctl.nc, w: newMsgWriter(ctl.nc, n.timers.HeartbeatTimeout, &n.sendq, &n.wg),
		key: attachKey{h.PeerID, h.Incarnation, h.Attempt}}
	n.conns[id] = c
	n.wg.Add(1)
	go n.readCtl(id, ctl.rd)
	n.perform() // the table may refuse it (peer cap) before the Hello
	if c.closing() {
		data.nc.Close()
		return
	}
	n.startData(c, data.nc, data.rd)
	n.noteRank(h.PeerID)
	n.tb.Receive(now, id, n.helloIn(h))
}

// dropConn closes a connection that never became a session.
func (n *Node) dropConn(nc, raw net.Conn) {
	n.gate.leave(raw)
	nc.Close()
}

// expirePending drops the halves of sessions whose other half did not
// come within the handshake timeout, and those the gate evicted to make
// room. Both maps are bounded by the gate (and what it evicted within a
// tick).
func (n *Node) expirePending(now time.Time) {
	n.dropEvicted(n.gate.halves())
	for k, p := range n.pendingData {
		if now.Sub(p.at) > n.timers.HandshakeTimeout {
			n.dropConn(p.nc, p.raw)
			delete(n.pendingData, k)
		}
	}
	for k, h := range n.heldHellos {
		if now.Sub(h.at) > n.timers.HandshakeTimeout {
			n.dropConn(h.nc, h.raw)
			delete(n.heldHellos, k)
		}
	}
}

// dropEvicted drops the half handshakes whose connection the gate evicted.
func (n *Node) dropEvicted(raws []net.Conn) {
	if len(raws) == 0 {
		return
	}
	gone := make(map[net.Conn]bool, len(raws))
	for _, raw := range raws {
		gone[raw] = true
	}
	for k, p := range n.pendingData {
		if gone[p.raw] {
			n.dropConn(p.nc, p.raw)
			delete(n.pendingData, k)
		}
	}
	for k, h := range n.heldHellos {
		if gone[h.raw] {
			n.dropConn(h.nc, h.raw)
			delete(n.heldHellos, k)
		}
	}
}

func (n *Node) dataEvent(now time.Time, ev evData) {
	c := n.conns[ev.id]
	if c == nil {
		return
	}
	n.obs.data(now, ev.id, ev.ev)
	switch e := ev.ev.(type) {
	case datapath.SendEnd:
		n.tb.SendEnd(now, ev.id, e.Job, e.OK, e.Bytes)
	case datapath.RecvProgress:
		if e.Queued {
			n.tb.DataQueued(now, ev.id, e.Job)
		} else {
			n.tb.DataProgress(now, ev.id, e.Job, e.Bytes)
		}
	case datapath.RecvCorrupt:
		n.tb.DataCorrupt(now, ev.id, e.Job)
	case datapath.RecvEnd:
		if e.Summed {
			// Before DataEnd, which commits the slots or frees them: they are
			// still this load's Filling slots, with the sums their chunks
			// were checked against (the data path wrote them). Serving the
			// blocks on then sends those sums instead of summing cold bytes.
			for _, sl := range e.Slots {
				n.st.MarkSummed(store.Slot(sl))
			}
		}
		n.tb.DataEnd(now, ev.id, e.Job, e.OK, e.Bytes)
	case datapath.ProbeAck:
		n.tb.ProbeAck(now, ev.id, e.Seq)
	case datapath.Closed:
		if c.st == ctlOpen {
			n.moveCtl(c, ctlDataDown)
			n.log.Info("data connection closed", "conn", ev.id, "err", e.Err)
			if c.nc != nil && peerClosed(e.Err) {
				// A peer that ends the session in order (Goodbye: shutdown,
				// idle, incompatible) closes both connections; our two
				// readers race to report. Let the control connection say why
				// before the session is failed for its data path.
				c.dataLostAt = now
				return
			}
		}
		n.dataClosed(now, c)
	}
}

// dataLossGrace is how long a data connection the peer closed waits for
// its control connection to explain (a Goodbye, or its own end) before the
// session fails for it: a crashed peer's sockets end together, an orderly
// one's Goodbye is already on the wire.
const dataLossGrace = 250 * time.Millisecond

// peerClosed reports whether a data connection ended by the peer's doing
// (EOF, reset), not by our close, our read timeout or a protocol error.
func peerClosed(err error) bool {
	return !errors.Is(err, datapath.ErrClosed) && !errors.Is(err, datapath.ErrTimeout) &&
		!errors.Is(err, datapath.ErrProtocol)
}

// expireDataLoss fails the sessions whose data connection the peer closed
// while their control connection stayed silent for dataLossGrace.
func (n *Node) expireDataLoss(now time.Time) {
	for _, c := range n.conns {
		if !c.dataLostAt.IsZero() && c.st == ctlDataDown && now.Sub(c.dataLostAt) >= dataLossGrace {
			n.dataClosed(now, c)
		}
	}
}

// dataClosed tells the table, once, that the session's data path is
// quiet. Callers know it is: the data connection ended or never was.
func (n *Node) dataClosed(now time.Time, c *ctlConn) {
	switch c.st {
	case ctlDataDown:
		n.moveCtl(c, ctlReported)
	case ctlClosing:
		n.moveCtl(c, ctlDone)
	default:
		return // told already
	}
	n.tb.DataClosed(now, c.id)
}

// perform carries out the table's effects: every action, in order (an
// action may report back to the table, which decides more), and the jobs'
// results, kept for the engine's next poll (takeResults).
func (n *Node) perform() {
	for {
		eff := n.tb.TakeEffects()
		if eff.Empty() {
			return
		}
		if len(eff.Results) > 0 {
			n.results = append(n.results, eff.Results...)
			select {
			case n.settled <- struct{}{}:
			default: // a token is already there: WaitFinished will look
			}
		}
		for _, a := range eff.Actions {
			n.act(a)
		}
	}
}

// takeResults returns the job results settled since the last call.
func (n *Node) takeResults() []JobResult {
	r := n.results
	n.results = nil
	return r
}

func (n *Node) act(a loads.Action) {
	n.obs.action(time.Now(), a, a.Kind == loads.ActClose && n.tb.ClosedByPolicy(a.Conn))
	switch a.Kind {
	case loads.ActDial:
		c := &ctlConn{id: a.Conn, key: attachKey{peer: a.Peer, attempt: uint64(a.Conn)}, dialed: true}
		cryptorand.Read(c.secret[:]) // never fails (crypto/rand's contract since Go 1.24)
		n.conns[a.Conn] = c
		n.wg.Add(1)
		probe := newDialProbe()
		n.dialing[a.Conn] = pendingDial{probe: probe, at: n.clk.now(time.Now())}
		go n.dial(a.Conn, a.Peer, c.secret, probe)
		return
	}
	c := n.conns[a.Conn]
	if c == nil {
		return
	}
	switch a.Kind {
	case loads.ActSend:
		if c.w != nil && !c.closing() {
			c.w.send(stampAttempt(a.Msg, c))
		}
	case loads.ActData:
		if c.data == nil || c.closing() {
			n.log.Error("data operation without a data connection", "conn", a.Conn, "op", a.Op.Kind)
			return
		}
		n.dataOp(c.data, a.Op)
	case loads.ActClose:
		if c.closing() {
			return
		}
		if c.w != nil {
			c.w.close()
		}
		quiet := c.st != ctlOpen || c.data == nil // its data path ended, or never was
		if c.data != nil {
			c.data.Close()
		}
		if c.st == ctlReported {
			n.moveCtl(c, ctlDone)
			return
		}
		n.moveCtl(c, ctlClosing)
		if quiet {
			n.dataClosed(n.clk.now(time.Now()), c)
		}
	}
}

func (n *Node) dataOp(dc *datapath.Conn, op session.DataOp) {
	switch op.Kind {
	case session.OpExpect:
		slots := make([]uint32, len(op.Slots))
		for i, s := range op.Slots {
			slots[i] = uint32(s)
		}
		dc.Expect(op.Job, slots)
	case session.OpOpen:
		dc.Open(op.Job)
	case session.OpSend:
		blocks := make([]datapath.Block, len(op.Blocks))
		for i, b := range op.Blocks {
			// Sums: the block's CRC32Cs as Put took them (nil for a block
			// a load filled): the writer sends them instead of summing.
			blocks[i] = datapath.Block{Index: b.Index, Slot: uint32(b.Slot), Sums: n.st.Sums(b.Slot)}
		}
		dc.Send(op.Job, blocks, op.Last)
	case session.OpCancel:
		dc.Cancel(op.Job)
	case session.OpProbe:
		dc.Probe(op.Seq)
	}
}

var _ datapath.SumMemory = (*Node)(nil)

// stampAttempt puts a dialed connection's attempt and secret into its
// Hello (dial put the same attempt, and a MAC made with the secret, into
// its DataAttach), so that the accepting side pairs the two halves of this
// attempt only. Both belong to the connection, not to the session, which
// is why the I/O layer sets them.
func stampAttempt(m wire.Message, c *ctlConn) wire.Message {
	h, ok := m.(*wire.Hello)
	if !ok || !c.dialed {
		return m
	}
	hc := *h
	hc.Attempt, hc.Secret = c.key.attempt, c.secret
	return &hc
}
