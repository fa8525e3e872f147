package sidecar

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/node"
	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/wire"

	"github.com/kvp2p/kvp2p/internal/engineapi"
	pb "github.com/kvp2p/kvp2p/internal/engineapi/enginepb"
	"github.com/kvp2p/kvp2p/internal/store"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// A fake engine for the engine API's integration tests: it owns a region
// file, talks to a real sidecar over its Unix socket, and answers the
// sidecar's asks from the chunks it says it holds, as vLLM's tier would.

const engChunks = 16

type sidecar struct {
	sc     *Sidecar
	node   *node.Node // nil until the first Register if the config has no geometry
	chunks uint64     // region geometry
	block  int
	dir    string // the region directory
	socket string
	region string // the region file
	stop   func() // stops the node (idempotent)
}

// sidecarConfig is a test sidecar's config, as `kvp2p serve` takes it:
// the node's and the engine API's.
type sidecarConfig struct {
	node.Config
	Engine EngineConfig
	// tree, if set, is the state the sidecar reads of its engine's
	// processes (stall.go); else they read as neither runnable nor stopped.
	tree func(pid int) (runnable, stopped bool)
}

// startSidecar runs a node in engine mode on loopback with a region file of
// engChunks chunks of nodetest.BlockBytes bytes.
func startSidecar(t testing.TB, mut func(*sidecarConfig)) *sidecar {
	t.Helper()
	return startSidecarOf(t, engChunks, nodetest.BlockBytes, mut)
}

// startSidecarOf is startSidecar with a region of chunks chunks of block bytes.
func startSidecarOf(t testing.TB, chunks, block int, mut func(*sidecarConfig)) *sidecar {
	t.Helper()
	return startSidecarIn(t, t.TempDir(), chunks, block, mut)
}

// startSidecarIn is startSidecarOf with the region file and sockets in dir.
func startSidecarIn(t testing.TB, dir string, chunks, block int, mut func(*sidecarConfig)) *sidecar {
	t.Helper()
	region := filepath.Join(dir, "vllm_offload_e.mmap")
	if err := os.WriteFile(region, make([]byte, chunks*block), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "engine.sock")
	// Generous serve and lookup timeouts: the machine that runs the tests
	// is shared, and a step can wait long for the CPU. The tests check
	// what happens, not how fast.
	cfg := sidecarConfig{node.Config{PeerID: ln.Addr().String(), BlockBytes: block, Slots: chunks, HashSeed: "s"},
		EngineConfig{Socket: sock, RegionDir: dir, ServeTimeout: 5 * time.Second}, nil}
	cfg.Timers.LookupTimeout = 10 * time.Second
	if mut != nil {
		mut(&cfg)
	}
	// As `kvp2p serve` does: with slots and block_bytes unset the node
	// is built at the first Register (attach sets s.node then).
	sc, err := New(cfg.Config, cfg.Engine)
	if err != nil {
		t.Fatal(err)
	}
	if sc.eng != nil {
		// The fake engine is this test process, always running: its
		// state says nothing of the engine it plays (stall.go's tree).
		sc.eng.tree = func(int) (bool, bool) { return false, false }
		if cfg.tree != nil {
			sc.eng.tree = cfg.tree
		}
	}
	eln, err := engineapi.ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	served, engServed := make(chan error, 1), make(chan error, 1)
	go func() { served <- sc.Serve(ln) }()
	go func() { engServed <- sc.ServeEngine(eln) }()
	var once sync.Once
	s := &sidecar{sc: sc, node: sc.Node(), chunks: uint64(chunks), block: block, dir: dir, socket: sock, region: region}
	s.stop = func() {
		once.Do(func() {
			sc.Close()
			if err := <-served; err != nil {
				t.Errorf("serve: %v", err)
			}
			if err := <-engServed; err != nil {
				t.Errorf("serve engine: %v", err)
			}
		})
	}
	t.Cleanup(s.stop)
	return s
}

// fakeEngine is one engine attached to a sidecar.
type fakeEngine struct {
	t      testing.TB
	c      pb.EngineClient
	reg    uint64
	cancel context.CancelFunc
	done   chan struct{} // the Attach reader ended

	mu       sync.Mutex
	held     map[wire.Key]uint32 // blocks the engine holds: key -> chunk
	pins     map[uint64]int      // pin id -> chunks pinned
	released int
	nextJob  uint64
	pinOf    func(ask uint64) uint64 // if set, the pin id granted for an ask
	asks     int                     // asks received
	holdAsks bool                    // if set, asks are left unanswered (an engine that does not step)
	askDelay time.Duration           // if set, asks are answered this late (an engine starved of CPU)
}

// attach dials the sidecar and registers; the engine detaches at cleanup.
func attach(t testing.TB, s *sidecar) *fakeEngine {
	t.Helper()
	e, err := tryAttach(t, s, s.chunks, uint64(s.block), s.region)
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	return e
}

func tryAttach(t testing.TB, s *sidecar, chunks, stride uint64, region string) (*fakeEngine, error) {
	t.Helper()
	return tryRegister(t, s, &pb.Register{ApiVersion: pb.ApiVersion_API_VERSION_1, EngineId: "e", RegionPath: region, NumChunks: chunks, RowStride: stride})
}

// tryRegister attaches with the Register given.
func tryRegister(t testing.TB, s *sidecar, reg *pb.Register) (*fakeEngine, error) {
	t.Helper()
	cc, err := grpc.NewClient("unix://"+s.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	e := &fakeEngine{t: t, c: pb.NewEngineClient(cc), cancel: cancel, done: make(chan struct{}),
		held: map[wire.Key]uint32{}, pins: map[uint64]int{}}
	st, err := e.c.Attach(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	if err := st.Send(&pb.EngineMessage{Msg: &pb.EngineMessage_Register{Register: reg}}); err != nil {
		cancel()
		return nil, err
	}
	m, err := st.Recv()
	if err != nil {
		cancel()
		return nil, err
	}
	e.reg = m.GetRegistered().GetRegistration()
	if s.node == nil {
		s.node = s.sc.Node() // built by this Register
	}
	var sendMu sync.Mutex
	send := func(m *pb.EngineMessage) {
		sendMu.Lock()
		defer sendMu.Unlock()
		_ = st.Send(m)
	}
	go func() { // answers asks and pings until the stream ends
		defer close(e.done)
		for {
			m, err := st.Recv()
			if err != nil {
				return
			}
			switch {
			case m.GetPing() != nil:
				send(&pb.EngineMessage{Msg: &pb.EngineMessage_Ping{Ping: m.GetPing()}})
			case m.GetAsk() != nil:
				if g := e.grant(m.GetAsk()); g != nil {
					e.mu.Lock()
					delay := e.askDelay
					e.mu.Unlock()
					if delay > 0 {
						time.AfterFunc(delay, func() { send(&pb.EngineMessage{Msg: &pb.EngineMessage_Grant{Grant: g}}) })
						continue
					}
					send(&pb.EngineMessage{Msg: &pb.EngineMessage_Grant{Grant: g}})
				}
			case m.GetRelease() != nil:
				e.mu.Lock()
				for _, id := range m.GetRelease().PinIds {
					delete(e.pins, id)
					e.released++
				}
				e.mu.Unlock()
			}
		}
	}()
	t.Cleanup(e.detach)
	return e, nil
}

// grant answers an ask, or returns nil to leave it unanswered (holdAsks).
func (e *fakeEngine) grant(a *pb.ServeAsk) *pb.ServeGrant {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.asks++
	if e.holdAsks {
		return nil
	}
	g := &pb.ServeGrant{AskId: a.AskId, PinId: a.AskId + 1000}
	if e.pinOf != nil {
		g.PinId = e.pinOf(a.AskId)
	}
	for _, kb := range a.Keys {
		if c, ok := e.held[wire.Key(kb)]; ok {
			g.Keys = append(g.Keys, kb)
			g.ChunkIds = append(g.ChunkIds, c)
		}
	}
	if len(g.Keys) > 0 {
		e.pins[g.PinId] = len(g.Keys)
	}
	return g
}

// detach ends the engine's stream and waits for its reader.
func (e *fakeEngine) detach() {
	e.cancel()
	<-e.done
}

// write puts data in chunk c of the region file, as vLLM's worker would.
func writeChunk(t testing.TB, s *sidecar, c uint32, data []byte) {
	t.Helper()
	f, err := os.OpenFile(s.region, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, int64(c)*int64(s.block)); err != nil {
		t.Fatal(err)
	}
}

func readChunk(t testing.TB, s *sidecar, c uint32) []byte {
	t.Helper()
	f, err := os.Open(s.region)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, s.block)
	if _, err := f.ReadAt(b, int64(c)*int64(s.block)); err != nil {
		t.Fatal(err)
	}
	return b
}

func (e *fakeEngine) step(req *pb.StepRequest) (*pb.StepResponse, error) {
	req.Registration = e.reg
	return e.c.Step(context.Background(), req)
}

func (e *fakeEngine) mustStep(req *pb.StepRequest) *pb.StepResponse {
	e.t.Helper()
	resp, err := e.step(req)
	if err != nil {
		e.t.Fatalf("step: %v", err)
	}
	return resp
}

func (e *fakeEngine) job(req string, keys []wire.Key, chunks ...uint32) *pb.Job {
	e.nextJob++
	j := &pb.Job{JobId: e.nextJob, ReqId: req, ChunkIds: chunks}
	for _, k := range keys {
		j.Keys = append(j.Keys, bytes.Clone(k[:]))
	}
	return j
}

// write puts each key's test bytes into its chunk, as vLLM's worker would.
func (e *fakeEngine) write(s *sidecar, keys []wire.Key, chunks ...uint32) {
	e.t.Helper()
	for i, k := range keys {
		writeChunk(e.t, s, chunks[i], nodetest.Bytes(k))
	}
}

// store writes the keys' bytes and stores them through the sidecar; it
// waits for the store's result.
func (e *fakeEngine) store(s *sidecar, req string, p *pb.TransferParams, keys []wire.Key, chunks ...uint32) {
	e.t.Helper()
	e.write(s, keys, chunks...)
	id, resp := e.submitStore(req, p, keys, chunks...)
	if d := e.waitJob(id, resp); !d.Success {
		e.t.Fatalf("store %d failed: %s", id, d.Reason)
	}
}

// submitStore stores chunks that already hold the keys' blocks, without
// waiting: a PD producer's store ends only when the decoder has fetched it.
func (e *fakeEngine) submitStore(req string, p *pb.TransferParams, keys []wire.Key, chunks ...uint32) (uint64, *pb.StepResponse) {
	e.t.Helper()
	e.mu.Lock()
	for i, k := range keys {
		e.held[k] = chunks[i]
	}
	e.mu.Unlock()
	j := e.job(req, keys, chunks...)
	return j.JobId, e.mustStep(&pb.StepRequest{NewRequests: []*pb.NewRequest{{ReqId: req, Params: p}}, Stores: []*pb.Job{j}, EndStep: true})
}

// waitJob steps (empty steps) until job id is reported, starting with the
// answers in resp.
func (e *fakeEngine) waitJob(id uint64, resp *pb.StepResponse) *pb.JobDone {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, d := range resp.Finished {
			if d.JobId == id {
				return d
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("job %d: no result", id)
		}
		<-time.After(2 * time.Millisecond)
		resp = e.mustStep(&pb.StepRequest{EndStep: true})
	}
}

// lookUntil looks k up for req, a step at a time, until the verdict is not
// RETRY; it returns the verdicts seen.
func (e *fakeEngine) lookUntil(req string, k wire.Key) []pb.Verdict {
	e.t.Helper()
	var seen []pb.Verdict
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		resp := e.mustStep(&pb.StepRequest{Lookups: []*pb.LookupBatch{{ReqId: req, Keys: [][]byte{bytes.Clone(k[:])}}}, EndStep: true})
		v := resp.Lookups[0].Verdicts[0]
		seen = append(seen, v)
		if v != pb.Verdict_VERDICT_RETRY {
			return seen
		}
		<-time.After(2 * time.Millisecond)
	}
	e.t.Fatalf("lookup of %x stayed RETRY", k[:4])
	return nil
}

func remoteOf(t testing.TB, s *sidecar) *pb.Remote {
	h, p, err := net.SplitHostPort(s.node.Config().PeerID)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(p)
	return &pb.Remote{Host: h, Port: uint32(port)}
}

// chunkState and storeStats read the sidecar's store in its loop.
func chunkState(t testing.TB, s *sidecar, c store.Slot) store.State {
	t.Helper()
	var st store.State
	if err := s.node.Do(func(time.Time) { st = s.node.Store().State(c) }); err != nil {
		t.Fatal(err)
	}
	return st
}

func storeStats(t testing.TB, s *sidecar) store.Stats {
	t.Helper()
	var st store.Stats
	if err := s.node.Do(func(time.Time) { st = s.node.Store().Stats() }); err != nil {
		t.Fatal(err)
	}
	return st
}
