package engineapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	pb "github.com/kvp2p/kvp2p/internal/engineapi/enginepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Backend is what the service drives; the engine sidecar (internal/sidecar)
// implements it, running each call in its node's loop. Methods are
// called from gRPC goroutines, concurrently.
type Backend interface {
	// Attach registers an engine whose messages go to out, and posts its
	// Registered to out before any other message. It returns a gRPC status
	// error to refuse.
	Attach(reg *pb.Register, out Outbox) (*pb.Registered, error)
	// Detach ends registration id: the engine is gone.
	Detach(id uint64)
	// Grant delivers the engine's answer to an ask.
	Grant(id uint64, g *pb.ServeGrant)
	// Step applies one shape-checked step, all or nothing. It keeps no
	// part of req past its return: on the step socket, a lookup batch's
	// KeysPacked points into the connection's frame buffer, which the
	// next frame overwrites.
	Step(req *pb.StepRequest) (*pb.StepResponse, error)
}

// Outbox takes the sidecar's messages to one engine. Post never blocks.
type Outbox interface {
	Post(m *pb.SidecarMessage)
}

// starvedGrace is how many more EngineTimeouts an engine silent past one
// is given while its process is runnable (starved of CPU, its pings
// waiting for a core), as the plugin gives a starved sidecar: four times
// EngineTimeout in all.
const starvedGrace = 3

// Options tune a Server; zero fields take the defaults in their comments.
type Options struct {
	Limits        Limits        // default DefaultLimits()
	PingInterval  time.Duration // sidecar pings on Attach; default 250 ms
	EngineTimeout time.Duration // an engine silent this long is gone; default 3 s
	RegisterWait  time.Duration // the first message must come within; default 5 s
	Log           *slog.Logger
}

// Server is the engine API on one or more listeners.
type Server struct {
	pb.UnimplementedEngineServer
	b      Backend
	opt    Options
	grpc   *grpc.Server
	log    *slog.Logger
	maxMsg int // the largest request, on gRPC and on the step socket
	wg     sync.WaitGroup
	// runnable reports whether a process waits for a CPU
	// (processRunnable; tests replace it).
	runnable func(pid int) bool

	mu        sync.Mutex // guards the step socket's state; never held across I/O
	stopped   bool
	stepPath  string
	stepLns   []net.Listener
	stepConns map[net.Conn]struct{}
}

// New builds a server over b.
func New(b Backend, opt Options) *Server {
	if opt.Limits == (Limits{}) {
		opt.Limits = DefaultLimits()
	}
	if opt.PingInterval <= 0 {
		opt.PingInterval = 250 * time.Millisecond
	}
	if opt.EngineTimeout <= 0 {
		opt.EngineTimeout = 3 * time.Second
	}
	if opt.RegisterWait <= 0 {
		opt.RegisterWait = 5 * time.Second
	}
	log := opt.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// A step of MaxKeysPerStep 16-byte keys with its framing fits in 4 MiB
	// (gRPC's default) only up to ~100k keys; size the cap to the limits.
	maxMsg := 4<<20 + opt.Limits.MaxKeysPerStep*(KeyBytes+8)
	s := &Server{b: b, opt: opt, log: log, maxMsg: maxMsg, stepConns: map[net.Conn]struct{}{}, runnable: processRunnable}
	s.grpc = grpc.NewServer(grpc.MaxRecvMsgSize(maxMsg), grpc.MaxSendMsgSize(maxMsg))
	pb.RegisterEngineServer(s.grpc, s)
	return s
}

// Serve serves ln until Stop; it returns nil after Stop.
func (s *Server) Serve(ln net.Listener) error {
	err := s.grpc.Serve(ln)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Stop closes every listener, stream and step connection at once, and
// returns once the step connections' goroutines are gone.
func (s *Server) Stop() {
	s.mu.Lock()
	s.stopped = true
	lns := s.stepLns
	conns := make([]net.Conn, 0, len(s.stepConns))
	for c := range s.stepConns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, ln := range lns {
		ln.Close()
	}
	for _, c := range conns {
		c.Close()
	}
	s.grpc.Stop()
	s.wg.Wait()
}

// ListenUnix listens on a Unix socket at path, created mode 0600. A stale
// socket at path is removed first; any other kind of file is an error.
func ListenUnix(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("engineapi: %s exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("engineapi: removing stale socket: %w", err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("engineapi: %w", err)
	}
	return pidListener{ln}, nil
}

// Step implements the Step call.
func (s *Server) Step(_ context.Context, req *pb.StepRequest) (*pb.StepResponse, error) {
	if err := CheckStep(req, s.opt.Limits); err != nil {
		return nil, err
	}
	return s.b.Step(req)
}

// Attach implements the Attach stream.
func (s *Server) Attach(st pb.Engine_AttachServer) (end error) {
	first, err := recvWithin(st, s.opt.RegisterWait)
	if err != nil {
		return err
	}
	reg := first.GetRegister()
	if reg == nil {
		return status.Error(codes.InvalidArgument, "the first message on Attach must be a Register")
	}
	if err := CheckRegister(reg); err != nil {
		return err
	}
	q := newQueue()
	var out Outbox = q
	if path := s.stepPathFor(st.Context()); path != "" {
		out = stampStepSocket{q, path}
	}
	if p, ok := peer.FromContext(st.Context()); ok && pidOf(p.Addr) > 0 {
		out = pidOutbox{out, pidOf(p.Addr)}
	}
	ok, err := s.b.Attach(reg, out)
	if err != nil {
		return err
	}
	id := ok.Registration
	s.log.Info("engine attached", "engine_id", reg.EngineId, "registration", id, "region", reg.RegionPath)
	defer func() {
		s.b.Detach(id)
		// Why: the engine closed its stream (nil), went silent or stopped
		// reading (the sidecar's timers), or the transport failed.
		s.log.Info("engine detached", "engine_id", reg.EngineId, "registration", id, "cause", end)
	}()

	ctx, cancel := context.WithCancel(st.Context())
	defer cancel()
	heard := make(chan struct{}, 1)
	recvErr := make(chan error, 1)
	go func() { // the reader
		for {
			m, err := st.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case heard <- struct{}{}:
			default:
			}
			if g := m.GetGrant(); g != nil {
				s.b.Grant(id, g)
			} else if m.GetRegister() != nil {
				recvErr <- status.Error(codes.InvalidArgument, "Register twice on one stream")
				return
			}
		}
	}()
	// The sender below is the stream's one writer; this goroutine only
	// decides. Send blocks while the engine does not read (HTTP/2 flow
	// control), so it runs apart: the silence timer, the outbox bound and
	// the stall timer fire however long a Send blocks. Returning ends the
	// stream, which unblocks that Send (gRPC cancels the stream).
	batches := make(chan []*pb.SidecarMessage, 1) // handed only when the sender is idle
	sent := make(chan error, 1)                   // one per batch: nil, or the error that ended the sender
	go func() {
		for {
			select {
			case batch := <-batches:
				var err error
				for _, m := range batch {
					if err = st.Send(m); err != nil {
						break
					}
				}
				sent <- err
				if err != nil {
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	ping := time.NewTicker(s.opt.PingInterval)
	defer ping.Stop()
	silent := time.NewTimer(s.opt.EngineTimeout)
	defer silent.Stop()
	stall := time.NewTimer(s.opt.EngineTimeout)
	stall.Stop()
	defer stall.Stop()
	busy := false // a batch is with the sender
	guard := pauseGuard{every: s.opt.PingInterval}
	pid, grace := 0, starvedGrace
	if p, ok := peer.FromContext(st.Context()); ok {
		pid = pidOf(p.Addr)
	}
	// woke re-arms both engine timers when the sidecar itself did not run
	// (see pauseGuard) and reports whether it did that.
	woke := func() bool {
		if !guard.woke(time.Now()) {
			return false
		}
		silent.Reset(s.opt.EngineTimeout)
		if busy {
			stall.Reset(s.opt.EngineTimeout)
		}
		return true
	}
	hand := func(batch []*pb.SidecarMessage) {
		batches <- batch // never blocks: the sender is idle and the buffer empty
		busy = true
		stall.Reset(s.opt.EngineTimeout)
	}
	var seq uint64
	for {
		switch {
		case !busy:
			msgs, err := q.take()
			if err != nil {
				return err
			}
			if len(msgs) > 0 {
				hand(msgs)
			}
		case q.overflowed():
			return q.overflowErr()
		}
		select {
		case <-q.wake:
			woke()
		case err := <-sent:
			if err != nil {
				return err
			}
			busy = false
			stall.Stop()
			woke()
		case <-stall.C:
			if woke() {
				continue
			}
			return status.Errorf(codes.ResourceExhausted, "engine has not read its stream for %v", s.opt.EngineTimeout)
		case <-ping.C:
			woke()
			if !busy { // a ping behind a blocked Send would tell nothing
				seq++
				hand([]*pb.SidecarMessage{{Msg: &pb.SidecarMessage_Ping{Ping: &pb.Ping{Seq: seq}}}})
			}
		case <-heard:
			woke()
			silent.Reset(s.opt.EngineTimeout)
			grace = starvedGrace
		case <-silent.C:
			if woke() {
				continue
			}
			if grace > 0 && s.runnable(pid) {
				// Its process waits for a CPU: slow, not hung. Given up to
				// starvedGrace more timeouts, then taken for gone anyway.
				grace--
				s.log.Info("engine silent but runnable (starved of CPU): waiting on", "engine_id", reg.EngineId,
					"silent_for", s.opt.EngineTimeout*time.Duration(starvedGrace-grace))
				silent.Reset(s.opt.EngineTimeout)
				continue
			}
			return status.Errorf(codes.DeadlineExceeded, "engine silent for %v", s.opt.EngineTimeout*time.Duration(starvedGrace-grace+1))
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// recvWithin reads one message or gives up after d.
func recvWithin(st pb.Engine_AttachServer, d time.Duration) (*pb.EngineMessage, error) {
	type res struct {
		m   *pb.EngineMessage
		err error
	}
	ch := make(chan res, 1)
	go func() {
		m, err := st.Recv()
		ch <- res{m, err}
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.m, r.err
	case <-t.C:
		// Returning ends the stream, which ends the Recv above.
		return nil, status.Errorf(codes.DeadlineExceeded, "no Register within %v", d)
	}
}

// stampStepSocket is the Outbox of an engine that may use the step
// socket: the Registered the backend posts names it.
type stampStepSocket struct {
	*queue
	path string
}

func (o stampStepSocket) Post(m *pb.SidecarMessage) {
	if r := m.GetRegistered(); r != nil && r.StepSocket == "" {
		r.StepSocket = o.path
	}
	o.queue.Post(m)
}

// maxQueued bounds the messages waiting for an engine that does not read
// its stream; beyond it the engine is treated as gone.
const maxQueued = 1 << 14

// queue is an Outbox: a mutex-protected slice and a wake channel; the lock
// is never held while sending.
type queue struct {
	mu       sync.Mutex
	msgs     []*pb.SidecarMessage
	overflow bool
	wake     chan struct{}
}

func newQueue() *queue { return &queue{wake: make(chan struct{}, 1)} }

func (q *queue) Post(m *pb.SidecarMessage) { q.post(m) }

func (q *queue) post(m *pb.SidecarMessage) {
	q.mu.Lock()
	if len(q.msgs) < maxQueued {
		q.msgs = append(q.msgs, m)
	} else {
		q.overflow = true
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take returns the queued messages, or an error if some were dropped.
func (q *queue) take() ([]*pb.SidecarMessage, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.overflow {
		return nil, q.overflowErr()
	}
	m := q.msgs
	q.msgs = nil
	return m, nil
}

// overflowed reports whether messages were dropped.
func (q *queue) overflowed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.overflow
}

func (q *queue) overflowErr() error {
	return status.Errorf(codes.ResourceExhausted, "engine does not read its stream: %d messages queued", maxQueued)
}
