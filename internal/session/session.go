package session

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/kvp2p/kvp2p/internal/fsm"
	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// phase is a session's state. The phases are ordered: a session only moves
// forward (legalMove), and ended or later means over.
type phase uint8

const (
	connecting  phase = iota // outbound, dial in progress
	handshaking              // connection up (or accepted), Hellos under way
	ready                    // the peer's Hello accepted and ours acknowledged
	ended                    // over, with one cause; its data path may still run
	closed                   // ended and its data path closed (DataClosed): slots released
)

var phaseNames = [...]string{"connecting", "handshaking", "ready", "ended", "closed"}

func (p phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", p)
}

// legalMove is the session's transition table:
//
//	connecting  -> handshaking (Start), ended (dial failed, handshake timeout, Close)
//	handshaking -> ready (both Hellos done), ended
//	ready       -> ended
//	ended       -> closed (DataClosed)
func legalMove(from, to phase) bool {
	switch from {
	case connecting:
		return to == handshaking || to == ended
	case handshaking:
		return to == ready || to == ended
	case ready:
		return to == ended
	case ended:
		return to == closed
	}
	return false
}

// moveTo changes phase; an illegal move is reported (fsm.Illegal).
func (s *Session) moveTo(to phase) {
	if !legalMove(s.phase, to) {
		fsm.Illegal(s.log, "session "+s.peer, s.phase, to)
	}
	s.phase = to
}

// Session is the state of one peer. See the package doc for the contract.
//
// The fields a heartbeat reads (phase, the heartbeat clocks, the output,
// the in-flight counts) come first: a large fleet's sessions are far
// apart in memory, and each cache line a message touches is a miss.
type Session struct {
	phase      phase
	cause      health.Cause
	outbound   bool
	helloRecv  bool
	ackRecv    bool
	ackHeld    bool // DeferAck: our HelloAck waits for AckHello
	cfg        *Config
	lastRecv   time.Time
	lastSend   time.Time
	lastActive time.Time // last message in either direction, for idle eviction
	pingSeq    uint64
	out        Out
	client     client
	server     server

	log       *slog.Logger
	blocks    Blocks
	peer      string // peer id: as dialed (outbound) or as advertised (inbound, after Hello)
	created   time.Time
	peerHello wire.Hello
	queued    []wire.Message // our sends held until the handshake completes
	// pathQuiet: the longest silence this session's data path can show
	// while its peer is alive, as this node's kernel sees the path
	// (SetPathQuiet); 0 until told.
	pathQuiet time.Duration
}

// New creates a session. For an outbound session peer is the id dialed and
// the handshake clock starts now (the dial counts against it); for an
// inbound one peer is empty until the peer's Hello names it.
func New(cfg *Config, blocks Blocks, peer string, outbound bool, now time.Time) *Session {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Session{
		cfg: cfg, log: log, blocks: blocks, peer: peer, outbound: outbound,
		phase: connecting, created: now, lastRecv: now, lastSend: now, lastActive: now,
	}
	if !outbound {
		s.phase = handshaking
	}
	s.client.init()
	return s
}

// Peer is the peer id ("" for an inbound session before its Hello).
func (s *Session) Peer() string { return s.peer }

// Outbound reports whether we dialed this session.
func (s *Session) Outbound() bool { return s.outbound }

// PeerHello is the peer's accepted Hello (zero before it).
func (s *Session) PeerHello() wire.Hello { return s.peerHello }

// Identified reports whether the peer's Hello has been accepted.
func (s *Session) Identified() bool { return s.helloRecv }

// Ready reports whether the handshake is complete.
func (s *Session) Ready() bool { return s.phase == ready }

// Pending reports whether the session is still connecting or handshaking.
func (s *Session) Pending() bool { return s.phase == connecting || s.phase == handshaking }

// PendingSince is when the session was created (the handshake clock).
func (s *Session) PendingSince() time.Time { return s.created }

// Ended returns the session's cause of end, or CauseNone.
func (s *Session) Ended() health.Cause { return s.cause }

// IdleFor is how long the session has carried no message.
func (s *Session) IdleFor(now time.Time) time.Duration { return now.Sub(s.lastActive) }

// Busy reports whether the session has work in flight in either role.
func (s *Session) Busy() bool { return s.client.busy() || s.server.busy() }

// OutEmpty reports whether TakeOut would return nothing.
func (s *Session) OutEmpty() bool { return s.out.Empty() }

// TakeOut returns what the session decided since the last call.
func (s *Session) TakeOut() Out {
	o := s.out
	s.out = Out{}
	return o
}

func (s *Session) logger() *slog.Logger { return s.log.With("peer", s.peer) }

// Start is called when the connection is up: it sends our Hello.
func (s *Session) Start(now time.Time) {
	if s.phase >= ended {
		return
	}
	if s.phase == connecting {
		s.moveTo(handshaking)
	}
	s.sendNow(now, &wire.Hello{
		Version: wire.Version, PeerID: s.cfg.LocalID, Incarnation: s.cfg.Incarnation,
		Domain: s.cfg.Domain, BlockBytes: s.cfg.BlockBytes, Fingerprint: s.cfg.Fingerprint,
		HashSeed: s.cfg.HashSeed, MaxInflight: s.cfg.MaxInflight, MaxFrame: wire.ControlFrameLimit(wire.DefaultLimits()),
	})
}

// send queues m behind the handshake, or sends it when ready.
func (s *Session) send(now time.Time, m wire.Message) {
	if s.phase >= ended {
		return
	}
	if s.phase != ready {
		s.queued = append(s.queued, m)
		return
	}
	s.sendNow(now, m)
}

func (s *Session) sendNow(now time.Time, m wire.Message) {
	s.out.Msgs = append(s.out.Msgs, m)
	s.lastSend = now
	s.lastActive = now
}

func (s *Session) data(op DataOp) {
	if s.phase >= ended {
		return
	}
	s.out.Data = append(s.out.Data, op)
}

// Receive dispatches one control message from the peer.
func (s *Session) Receive(now time.Time, m wire.Message) {
	if s.phase >= ended {
		return // messages behind a death in the same batch are dropped
	}
	s.lastRecv = now
	switch m.(type) {
	case *wire.Ping, *wire.Pong, *wire.LookupPending:
		// Heartbeats prove life but are not activity: idle eviction ignores
		// them. A LookupPending is worth no more than a Pong here: it says
		// the peer's node is alive, not that its engine serves (pending.go).
	default:
		s.lastActive = now
	}
	switch m := m.(type) {
	case *wire.Hello:
		s.onHello(now, m)
	case *wire.HelloAck:
		if s.ackRecv {
			s.protocolError(now, "duplicate hello-ack")
			return
		}
		s.ackRecv = true
		s.maybeReady(now)
	case *wire.Ping:
		s.out.Msgs = append(s.out.Msgs, &wire.Pong{Seq: m.Seq})
		s.lastSend = now
	case *wire.Pong:
	case *wire.Goodbye:
		c := health.CauseGoodbye
		if m.Reason == wire.GoodbyeIncompatible {
			c = health.CauseIncompatible
		}
		s.logger().Info("peer said goodbye", "reason", m.Reason, "detail", m.Detail)
		s.Close(now, c)
	default:
		if !s.helloRecv {
			s.protocolError(now, fmt.Sprintf("%s before hello", m.Type()))
			return
		}
		if err := s.dispatch(now, m); err != nil {
			s.protocolError(now, err.Error())
		}
	}
}

func (s *Session) dispatch(now time.Time, m wire.Message) error {
	switch m := m.(type) {
	case *wire.Lookup:
		return s.server.onLookup(s, now, m)
	case *wire.LookupResp:
		return s.client.onLookupResp(s, now, m)
	case *wire.Fetch:
		return s.server.onFetch(s, now, m)
	case *wire.TransferDone:
		s.client.onTransferDone(s, now, m)
	case *wire.Abort:
		s.server.onAbort(s, now, m)
	case *wire.AbortAck:
		s.client.onAbortAck(s, now, m)
	case *wire.LookupPending:
		s.client.onLookupPending(s, now, m)
	default:
		return fmt.Errorf("unexpected %s on the control connection", m.Type())
	}
	return nil
}

func (s *Session) onHello(now time.Time, h *wire.Hello) {
	if s.helloRecv {
		s.protocolError(now, "duplicate hello")
		return
	}
	if why := s.incompatible(h); why != "" {
		s.logger().Warn("rejecting peer hello", "from", h.PeerID, "why", why)
		s.sendNow(now, &wire.Goodbye{Reason: wire.GoodbyeIncompatible, Detail: why})
		s.Close(now, health.CauseIncompatible)
		return
	}
	s.helloRecv = true
	s.peerHello = *h
	if s.peer == "" {
		s.peer = h.PeerID
	}
	if !s.ackHeld {
		s.sendNow(now, &wire.HelloAck{PeerID: s.cfg.LocalID, Incarnation: s.cfg.Incarnation})
	}
	s.maybeReady(now)
}

// DeferAck holds back the HelloAck that the peer's Hello would get until
// AckHello. The table calls it for a newcomer it will hold while a live
// session of the same peer is probed (loads/hold.go): without our
// HelloAck the peer's session is not ready, so it sends no lookups or
// fetches that would have to be refused, and a spoofer that is then
// refused never had a session at all.
func (s *Session) DeferAck() { s.ackHeld = true }

// AckHello sends the HelloAck DeferAck held back, if the peer's Hello was
// accepted; otherwise it does nothing.
func (s *Session) AckHello(now time.Time) {
	if !s.ackHeld || s.phase >= ended {
		return
	}
	s.ackHeld = false
	if s.helloRecv {
		s.sendNow(now, &wire.HelloAck{PeerID: s.cfg.LocalID, Incarnation: s.cfg.Incarnation})
	}
}

// incompatible returns why a Hello is refused, or "".
func (s *Session) incompatible(h *wire.Hello) string {
	switch {
	case h.Version != wire.Version:
		return fmt.Sprintf("protocol version %d, want %d", h.Version, wire.Version)
	case h.BlockBytes != s.cfg.BlockBytes:
		return fmt.Sprintf("block bytes %d, want %d", h.BlockBytes, s.cfg.BlockBytes)
	case h.Fingerprint != "" && s.cfg.Fingerprint != "" && h.Fingerprint != s.cfg.Fingerprint:
		return fmt.Sprintf("layout fingerprint %q, want %q", h.Fingerprint, s.cfg.Fingerprint)
	case h.HashSeed != s.cfg.HashSeed:
		return fmt.Sprintf("hash seed %q, want %q", h.HashSeed, s.cfg.HashSeed)
	case s.outbound && h.PeerID != s.peer:
		return fmt.Sprintf("peer id %q, dialed %q", h.PeerID, s.peer)
	case h.PeerID == "":
		return "empty peer id"
	}
	return ""
}

func (s *Session) maybeReady(now time.Time) {
	if s.phase != handshaking || !s.helloRecv || !s.ackRecv {
		return
	}
	s.moveTo(ready)
	q := s.queued
	s.queued = nil
	for _, m := range q {
		s.sendNow(now, m)
	}
	s.client.flush(s, now)
}

func (s *Session) protocolError(now time.Time, why string) {
	s.logger().Warn("protocol error, disconnecting", "err", why)
	s.sendNow(now, &wire.Goodbye{Reason: wire.GoodbyeProtocol, Detail: why})
	s.Close(now, health.CauseProtocolError)
}

// EndOnFault ends the session on a fault this side detected, telling the peer
// first (Goodbye{Fault}): for the peer it is an orderly end, not evidence
// against it or its domain; for us the cause is the fault.
func (s *Session) EndOnFault(now time.Time, cause health.Cause) {
	if s.phase >= ended {
		return
	}
	if s.phase != connecting {
		s.sendNow(now, &wire.Goodbye{Reason: wire.GoodbyeFault, Detail: cause.String()})
	}
	s.Close(now, cause)
}

// Goodbye ends the session in order (idle eviction, shutdown, peer cap).
func (s *Session) Goodbye(now time.Time, reason wire.GoodbyeReason) {
	if s.phase >= ended {
		return
	}
	if s.phase != connecting {
		s.sendNow(now, &wire.Goodbye{Reason: reason})
	}
	s.Close(now, health.CauseGoodbye)
}

// Tick runs the session's timers.
func (s *Session) Tick(now time.Time) {
	switch s.phase {
	case ended, closed:
		return
	case connecting, handshaking:
		if now.Sub(s.created) >= s.cfg.HandshakeTimeout {
			s.logger().Warn("handshake timed out", "after", now.Sub(s.created))
			s.Close(now, health.CauseHandshakeFailed)
			return
		}
	case ready:
		if now.Sub(s.lastRecv) >= s.cfg.HeartbeatTimeout {
			s.logger().Warn("heartbeat timed out", "silent_for", now.Sub(s.lastRecv))
			s.EndOnFault(now, health.CauseHeartbeatTimeout)
			return
		}
		if now.Sub(s.lastSend) >= s.cfg.HeartbeatInterval {
			s.pingSeq++
			s.out.Msgs = append(s.out.Msgs, &wire.Ping{Seq: s.pingSeq})
			s.lastSend = now // a ping is not activity: idle eviction ignores it
		}
	}
	s.client.tick(s, now)
	if s.phase >= ended {
		return
	}
	s.server.tick(s, now)
}

// ConnFailed reports that the dial or the control connection failed before
// a Goodbye: conn-reset once ready, handshake-failed before.
func (s *Session) ConnFailed(now time.Time) {
	if s.phase == ready {
		s.Close(now, health.CauseConnReset)
	} else {
		s.Close(now, health.CauseHandshakeFailed)
	}
}

// Close ends the session with cause (the first cause wins). Loads fail at
// once; slots wait for DataClosed.
func (s *Session) Close(now time.Time, cause health.Cause) {
	if s.phase >= ended {
		return
	}
	s.moveTo(ended)
	s.cause = cause
	s.queued = nil
	s.out.Ended = cause
	s.client.close(s, now, cause)
	s.server.close(s, now)
}

// DataClosed reports that no data-path goroutine of this session can touch
// a slot any more. Call it once, after the session ended and its
// connections are closed.
func (s *Session) DataClosed(now time.Time) {
	if s.phase == closed {
		return
	}
	if s.phase < ended {
		s.ConnFailed(now) // the data path is gone: so is the session
	}
	s.moveTo(closed)
	s.client.dataClosed(s)
	s.server.dataClosed(s)
}
