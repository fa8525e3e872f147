package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/kvp2p/kvp2p/internal/node"

	"github.com/kvp2p/kvp2p/internal/engineapi"
	pb "github.com/kvp2p/kvp2p/internal/engineapi/enginepb"
	"github.com/kvp2p/kvp2p/internal/identity"
	"github.com/kvp2p/kvp2p/internal/region"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sidecar is an engine's sidecar whose geometry may come from the engine.
// A node's slots and block size are fixed when it is built (its store, its
// sessions' handshakes and its data path all use them), and the engine
// knows them only when it has sized its region. So when the config leaves
// slots or block_bytes unset, the Sidecar serves the engine API at once
// and builds the node at the first Register, from its num_chunks and
// row_stride; until then it has no peer side (peers that dial it wait or
// fail over, as for a sidecar whose engine is not up: it could neither
// serve nor load anything). A field the config does set must agree with
// the Register, or the Register is refused, as a node built from the
// config refuses it. Later registrations (a restarted engine) must agree
// with the geometry the node was built with: changing it takes a restart
// of the sidecar.
type Sidecar struct {
	cfg   node.Config
	ecfg  EngineConfig
	srv   *engineapi.Server
	built chan struct{} // closed once node is set
	stop  chan struct{} // closed when stopped before the node exists

	mu      sync.Mutex // guards node and stopped; never held across I/O
	node    *node.Node
	eng     *engine // node's sidecar hooks, set with it
	stopped bool
}

// maxBlockBytes is the largest block_bytes a config may set.
const maxBlockBytes = 256 << 20

// ErrNoEngineYet is what a Sidecar answers before its first engine has
// registered and so given it its geometry.
var ErrNoEngineYet = errors.New("kvp2p: waiting for the engine's first Register (it gives the sidecar its geometry)")

// New validates cfg and ecfg, which must enable the engine API, and
// builds a sidecar. With slots and block_bytes both set the node is built
// now, as newEngineNode does at a Register; otherwise at the first Register.
func New(cfg node.Config, ecfg EngineConfig) (*Sidecar, error) {
	if !ecfg.Enabled() {
		return nil, errors.New("kvp2p: a sidecar needs engine.socket or engine.addr")
	}
	if err := ecfg.Validate(); err != nil {
		return nil, err
	}
	if err := node.ValidateWithSidecar(cfg); err != nil {
		return nil, err
	}
	if cfg.TLS.Enabled() {
		// Fail at start, not at the engine's first Register.
		if _, err := identity.NewCreds(identity.Config(cfg.TLS)); err != nil {
			return nil, err
		}
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Sidecar{cfg: cfg, ecfg: ecfg, built: make(chan struct{}), stop: make(chan struct{})}
	s.srv = engineapi.New(backend{s}, engineapi.Options{Log: log.With("node", cfg.PeerID)})
	if cfg.Slots != 0 && cfg.BlockBytes != 0 {
		n, e, err := newEngineNode(cfg, ecfg)
		if err != nil {
			return nil, err
		}
		s.adoptLocked(n, e, "slots, block_bytes")
	}
	return s, nil
}

// adoptLocked makes n the sidecar's node. The engine API is the sidecar's,
// so the node stops it when it stops, as it stops its own.
func (s *Sidecar) adoptLocked(n *node.Node, e *engine, from string) {
	e.srv = s.srv
	e.geoFrom = from
	s.node, s.eng = n, e
	close(s.built)
}

// Node is the sidecar's node, or nil before the first Register.
func (s *Sidecar) Node() *node.Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.node
}

// bound returns the node and its engine state, once the node exists.
func (s *Sidecar) bound() (*node.Node, *engine, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.node, s.eng, s.node != nil
}

// newEngineNode builds a node whose slots are an engine's region, and its
// engine state (the node's Sidecar hooks).
func newEngineNode(cfg node.Config, ecfg EngineConfig) (*node.Node, *engine, error) {
	e := newEngine(ecfg, cfg.Slots, cfg.BlockBytes)
	n, err := node.NewWithSidecar(cfg, e)
	if err != nil {
		return nil, nil, err
	}
	e.contains = n.Store().Contains // the store's index: what kvp2p holds already
	return n, e, nil
}

// Built is closed once the node exists.
func (s *Sidecar) Built() <-chan struct{} { return s.built }

// ServeEngine serves the engine API on ln until the sidecar stops.
func (s *Sidecar) ServeEngine(ln net.Listener) error { return s.srv.Serve(ln) }

// ServeSteps serves the engine API's step socket (Step without gRPC, see
// engineapi.Server.ServeSteps) on ln until the sidecar stops.
func (s *Sidecar) ServeSteps(ln net.Listener) error { return s.srv.ServeSteps(ln) }

// AdvertiseSteps names ln to engines as the step socket before ServeSteps
// runs (engineapi.Server.AdvertiseSteps).
func (s *Sidecar) AdvertiseSteps(ln net.Listener) { s.srv.AdvertiseSteps(ln) }

// Serve waits for the node, then runs it on ln (Node.Serve). Stopped
// before that, it closes ln and returns nil.
func (s *Sidecar) Serve(ln net.Listener) error {
	select {
	case <-s.built:
		return s.Node().Serve(ln)
	case <-s.stop:
		ln.Close()
		return nil
	}
}

// stopEarly stops a sidecar that has no node yet and reports true; false
// means the node exists and the caller stops it.
func (s *Sidecar) stopEarly() (*node.Node, bool) {
	s.mu.Lock()
	n := s.node
	if n == nil && !s.stopped {
		s.stopped = true
		close(s.stop)
	}
	s.mu.Unlock()
	if n != nil {
		return n, false
	}
	s.srv.Stop()
	return nil, true
}

// Shutdown is Node.Shutdown once the node exists; before, it stops the
// engine API.
func (s *Sidecar) Shutdown(ctx context.Context) error {
	if n, early := s.stopEarly(); !early {
		return n.Shutdown(ctx)
	}
	return nil
}

// Close is Node.Close once the node exists; before, it stops the engine API.
func (s *Sidecar) Close() error {
	if n, early := s.stopEarly(); !early {
		return n.Close()
	}
	return nil
}

// Status is Node.Status, or ErrNoEngineYet.
func (s *Sidecar) Status(ctx context.Context) (*node.Snapshot, error) {
	if n := s.Node(); n != nil {
		return n.Status(ctx)
	}
	return nil, ErrNoEngineYet
}

// ReloadTLS is Node.ReloadTLS; before the node exists there is nothing to
// reload (the node reads the files when it is built).
func (s *Sidecar) ReloadTLS() error {
	if n := s.Node(); n != nil {
		return n.ReloadTLS()
	}
	return nil
}

// GoodbyeIdle is Node.GoodbyeIdle, or ErrNoEngineYet.
func (s *Sidecar) GoodbyeIdle() (int, error) {
	if n := s.Node(); n != nil {
		return n.GoodbyeIdle()
	}
	return 0, ErrNoEngineYet
}

// RefuseHandshakes is Node.RefuseHandshakes, or ErrNoEngineYet.
func (s *Sidecar) RefuseHandshakes(on bool) error {
	if n := s.Node(); n != nil {
		return n.RefuseHandshakes(on)
	}
	return ErrNoEngineYet
}

// geometry is the node's geometry for reg: the configured fields, which
// reg must agree with, and reg's for the others.
func (s *Sidecar) geometry(reg *pb.Register) (region.Geometry, error) {
	if reg.NumChunks > node.MaxSlots || reg.RowStride > maxBlockBytes {
		return region.Geometry{}, status.Errorf(codes.InvalidArgument,
			"region of %d chunks of %d bytes: a sidecar takes at most %d chunks of at most %d bytes",
			reg.NumChunks, reg.RowStride, node.MaxSlots, maxBlockBytes)
	}
	if c := s.cfg.Slots; c != 0 && uint64(c) != reg.NumChunks {
		return region.Geometry{}, status.Errorf(codes.FailedPrecondition,
			"region of %d chunks; this sidecar is configured for %d (slots)", reg.NumChunks, c)
	}
	if c := s.cfg.BlockBytes; c != 0 && uint64(c) != reg.RowStride {
		return region.Geometry{}, status.Errorf(codes.FailedPrecondition,
			"region's row_stride %d; this sidecar is configured for %d (block_bytes)", reg.RowStride, c)
	}
	return region.Geometry{NumChunks: reg.NumChunks, RowStride: reg.RowStride}, nil
}

// nodeFor returns the node reg attaches to, building it from reg if there
// is none yet; then it also returns reg's region, mapped (the Register's
// checks are done), for the caller to attach.
func (s *Sidecar) nodeFor(reg *pb.Register) (*node.Node, *engine, *region.Region, error) {
	if n, e, ok := s.bound(); ok {
		return n, e, nil, nil
	}
	geo, err := s.geometry(reg)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := checkIdentity(reg, s.cfg); err != nil {
		return nil, nil, nil, err
	}
	// The region is checked before the geometry is taken: a Register that
	// names no file of that size fixes nothing.
	r, err := region.Open(reg.RegionPath, s.ecfg.WithDefaults().RegionDir, geo)
	if err != nil {
		return nil, nil, nil, status.Errorf(codes.FailedPrecondition, "%v", err)
	}
	cfg := s.cfg
	cfg.Slots, cfg.BlockBytes = int(geo.NumChunks), int(geo.RowStride)
	n, e, err := newEngineNode(cfg, s.ecfg)
	if err != nil {
		r.Close()
		return nil, nil, nil, status.Errorf(codes.InvalidArgument, "the region's geometry: %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.stopped:
		r.Close()
		return nil, nil, nil, status.Error(codes.Unavailable, "kvp2p: sidecar stopping")
	case s.node != nil:
		// Another engine's Register built it first: attach as to any node
		// (its geometry is checked there).
		r.Close()
		return s.node, s.eng, nil, nil
	}
	s.adoptLocked(n, e, fmt.Sprintf("taken from the first engine's Register (engine_id %q); restart the sidecar to change it", reg.EngineId))
	n.Log().Info("geometry from the engine's Register", "num_chunks", geo.NumChunks, "row_stride", geo.RowStride)
	return n, e, r, nil
}

// backend is the engine API's backend (engineapi.Backend), before and
// after the node exists: once it does, each call runs in the node's loop.
type backend struct{ s *Sidecar }

var _ engineapi.Backend = backend{}

// errNodeClosed is what the engine hears once the node stopped.
var errNodeClosed = status.Error(codes.Unavailable, "kvp2p: node stopped")

func (b backend) Attach(reg *pb.Register, out engineapi.Outbox) (*pb.Registered, error) {
	n, e, r, err := b.s.nodeFor(reg)
	if err != nil {
		return nil, err
	}
	if r == nil {
		if r, err = e.openRegion(n, reg); err != nil {
			return nil, err
		}
	}
	return e.attachRegion(n, r, out)
}

func (b backend) Detach(id uint64) {
	n, e, ok := b.s.bound()
	if !ok {
		return
	}
	// Revoke its region at once, outside the loop; then forget it in it.
	e.revoke(n, id)
	_ = n.Do(func(now time.Time) { e.detach(n, now, id) })
}

func (b backend) Grant(id uint64, g *pb.ServeGrant) {
	if n, e, ok := b.s.bound(); ok {
		_ = n.Do(func(now time.Time) { e.grant(n, now, id, g) })
	}
}

func (b backend) Step(req *pb.StepRequest) (*pb.StepResponse, error) {
	n, e, ok := b.s.bound()
	if !ok {
		return nil, status.Errorf(codes.FailedPrecondition, "registration %d: no engine is attached: attach first", req.Registration)
	}
	var resp *pb.StepResponse
	var bad error
	if err := n.Do(func(now time.Time) { resp, bad = e.step(n, now, req) }); err != nil {
		return nil, errNodeClosed
	}
	return resp, bad
}
