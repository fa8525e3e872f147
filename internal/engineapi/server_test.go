package engineapi

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	pb "github.com/kvp2p/kvp2p/internal/engineapi/enginepb"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeBackend records what the service hands it.
type fakeBackend struct {
	mu       sync.Mutex
	refuse   error
	out      Outbox
	steps    int
	grants   []*pb.ServeGrant
	granted  chan struct{}
	detached chan uint64
}

func newFake() *fakeBackend {
	return &fakeBackend{detached: make(chan uint64, 4), granted: make(chan struct{}, 4)}
}

func (f *fakeBackend) Attach(reg *pb.Register, out Outbox) (*pb.Registered, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse != nil {
		return nil, f.refuse
	}
	f.out = out
	ok := &pb.Registered{Registration: 7, ApiVersion: pb.ApiVersion_API_VERSION_1}
	out.Post(&pb.SidecarMessage{Msg: &pb.SidecarMessage_Registered{Registered: ok}})
	return ok, nil
}

func (f *fakeBackend) Detach(id uint64) { f.detached <- id }

func (f *fakeBackend) Grant(id uint64, g *pb.ServeGrant) {
	f.mu.Lock()
	f.grants = append(f.grants, g)
	f.mu.Unlock()
	f.granted <- struct{}{}
}

func (f *fakeBackend) Step(req *pb.StepRequest) (*pb.StepResponse, error) {
	f.mu.Lock()
	f.steps++
	f.mu.Unlock()
	return &pb.StepResponse{PendingWork: true}, nil
}

// serve runs a Server over a Unix socket in a temporary directory and
// returns a client; everything stops at the end of the test.
func serve(t *testing.T, b Backend, opt Options, dial ...grpc.DialOption) pb.EngineClient {
	t.Helper()
	return serveServer(t, New(b, opt), dial...)
}

// serveServer serves s on a Unix socket until the test ends.
func serveServer(t *testing.T, s *Server, dial ...grpc.DialOption) pb.EngineClient {
	t.Helper()
	path := filepath.Join(t.TempDir(), "engine.sock")
	ln, err := ListenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	cc, err := grpc.NewClient("unix://"+path, append(dial, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Close()
		s.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return pb.NewEngineClient(cc)
}

func goodRegister() *pb.EngineMessage {
	return &pb.EngineMessage{Msg: &pb.EngineMessage_Register{Register: &pb.Register{
		ApiVersion: pb.ApiVersion_API_VERSION_1, EngineId: "e0", RegionPath: "/dev/shm/r", NumChunks: 4, RowStride: 4096,
	}}}
}

func TestListenUnix(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s")
	ln, err := ListenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want 0600", fi.Mode().Perm())
	}
	// A stale socket (its listener gone, the file left) is replaced.
	ln.(interface{ SetUnlinkOnClose(bool) }).SetUnlinkOnClose(false)
	ln.Close()
	ln2, err := ListenUnix(path)
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	ln2.Close()
	// Anything else at the path is left alone.
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ListenUnix(file); err == nil {
		t.Fatal("ListenUnix replaced a regular file")
	}
	if b, _ := os.ReadFile(file); string(b) != "keep" {
		t.Fatal("regular file changed")
	}
}

func TestAttachRegisterAndRelease(t *testing.T) {
	f := newFake()
	c := serve(t, f, Options{PingInterval: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	st, err := c.Attach(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(goodRegister()); err != nil {
		t.Fatal(err)
	}
	m, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if m.GetRegistered().GetRegistration() != 7 {
		t.Fatalf("first message %v, want Registered 7", m)
	}
	// Pings flow while the engine is attached.
	if m, err := st.Recv(); err != nil || m.GetPing() == nil {
		t.Fatalf("got %v, %v; want a ping", m, err)
	}
	// The backend's messages reach the engine; its grants reach the backend.
	f.mu.Lock()
	out := f.out
	f.mu.Unlock()
	out.Post(&pb.SidecarMessage{Msg: &pb.SidecarMessage_Ask{Ask: &pb.ServeAsk{AskId: 3}}})
	for {
		m, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if m.GetAsk() != nil {
			if m.GetAsk().AskId != 3 {
				t.Fatalf("ask %v", m.GetAsk())
			}
			break
		}
	}
	if err := st.Send(&pb.EngineMessage{Msg: &pb.EngineMessage_Grant{Grant: &pb.ServeGrant{AskId: 3, PinId: 9}}}); err != nil {
		t.Fatal(err)
	}
	<-f.granted
	// The stream's end is the engine's end.
	cancel()
	if id := <-f.detached; id != 7 {
		t.Fatalf("detached %d, want 7", id)
	}
}

func TestAttachRefusals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		first  *pb.EngineMessage
		refuse error
		want   codes.Code
	}{
		{"not a register", &pb.EngineMessage{Msg: &pb.EngineMessage_Ping{Ping: &pb.Ping{}}}, nil, codes.InvalidArgument},
		{"old version", &pb.EngineMessage{Msg: &pb.EngineMessage_Register{Register: &pb.Register{RegionPath: "/x", NumChunks: 1, RowStride: 1}}}, nil, codes.FailedPrecondition},
		{"future version", &pb.EngineMessage{Msg: &pb.EngineMessage_Register{Register: &pb.Register{ApiVersion: 2, RegionPath: "/x", NumChunks: 1, RowStride: 1}}}, nil, codes.FailedPrecondition},
		{"no region", &pb.EngineMessage{Msg: &pb.EngineMessage_Register{Register: &pb.Register{ApiVersion: 1, NumChunks: 1, RowStride: 1}}}, nil, codes.InvalidArgument},
		{"empty region", &pb.EngineMessage{Msg: &pb.EngineMessage_Register{Register: &pb.Register{ApiVersion: 1, RegionPath: "/x"}}}, nil, codes.InvalidArgument},
		{"backend refuses", goodRegister(), status.Error(codes.AlreadyExists, "taken"), codes.AlreadyExists},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			f.refuse = tc.refuse
			c := serve(t, f, Options{})
			st, err := c.Attach(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Send(tc.first); err != nil {
				t.Fatal(err)
			}
			_, err = st.Recv()
			if status.Code(err) != tc.want {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			select {
			case id := <-f.detached:
				t.Fatalf("refused engine detached as %d", id)
			default:
			}
		})
	}
}

func TestAttachSilentEngineIsGone(t *testing.T) {
	f := newFake()
	c := serve(t, f, Options{EngineTimeout: 50 * time.Millisecond, PingInterval: time.Hour})
	st, err := c.Attach(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(goodRegister()); err != nil {
		t.Fatal(err)
	}
	// The engine never speaks again: the sidecar ends the stream.
	for {
		_, err := st.Recv()
		if err != nil {
			if status.Code(err) != codes.DeadlineExceeded {
				t.Fatalf("stream ended with %v, want DeadlineExceeded", err)
			}
			break
		}
	}
	if id := <-f.detached; id != 7 {
		t.Fatalf("detached %d", id)
	}
}

// An engine that stays connected, and even keeps talking, but stops
// reading its stream: the sidecar's Send blocks on flow control, and the
// stall timer still ends the stream (the backend hears Detach). Before the
// sender ran apart, Send blocked the writer for good and nothing fired.
func TestAttachEngineThatStopsReading(t *testing.T) {
	f := newFake()
	const timeout = 200 * time.Millisecond
	// A fixed 64 KiB window (no BDP growth): a few messages fill it.
	c := serve(t, f, Options{EngineTimeout: timeout, PingInterval: time.Hour},
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	st := attachRegistered(t, ctx, c)
	// The engine keeps pinging, so the silence timer never fires: only
	// the stall timer can end this stream.
	pinging := make(chan struct{})
	go func() {
		defer close(pinging)
		tick := time.NewTicker(timeout / 4)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				if st.Send(&pb.EngineMessage{Msg: &pb.EngineMessage_Ping{Ping: &pb.Ping{}}}) != nil {
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	f.mu.Lock()
	out := f.out
	f.mu.Unlock()
	keys := make([][]byte, 4<<10) // 64 KiB of keys per message
	for i := range keys {
		keys[i] = make([]byte, KeyBytes)
	}
	for i := range 64 {
		out.Post(&pb.SidecarMessage{Msg: &pb.SidecarMessage_Ask{Ask: &pb.ServeAsk{AskId: uint64(i), Keys: keys}}})
	}
	select {
	case id := <-f.detached:
		if id != 7 {
			t.Fatalf("detached %d", id)
		}
	case <-time.After(30 * timeout): // a bound for a hang, not a measurement
		t.Fatal("an engine that does not read its stream was never detached")
	}
	// Reading again, the engine finds the stream ended for not reading.
	for {
		if _, err := st.Recv(); err != nil {
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("stream ended with %v, want ResourceExhausted", err)
			}
			break
		}
	}
	cancel()
	<-pinging
}

func TestAttachNoRegisterInTime(t *testing.T) {
	f := newFake()
	c := serve(t, f, Options{RegisterWait: 20 * time.Millisecond})
	st, err := c.Attach(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("got %v, want DeadlineExceeded", err)
	}
}

func TestStepShapeRefusedBeforeBackend(t *testing.T) {
	key := make([]byte, KeyBytes)
	lim := Limits{MaxKeysPerStep: 4, MaxItemsPerStep: 4, MaxIDBytes: 8}
	for _, tc := range []struct {
		name string
		req  *pb.StepRequest
		want codes.Code
	}{
		{"no registration", &pb.StepRequest{}, codes.InvalidArgument},
		{"short key", &pb.StepRequest{Registration: 1, Lookups: []*pb.LookupBatch{{ReqId: "r", Keys: [][]byte{{1}}}}}, codes.InvalidArgument},
		{"empty req id", &pb.StepRequest{Registration: 1, Lookups: []*pb.LookupBatch{{Keys: [][]byte{key}}}}, codes.InvalidArgument},
		{"long req id", &pb.StepRequest{Registration: 1, Finished: []string{"123456789"}}, codes.InvalidArgument},
		{"too many keys", &pb.StepRequest{Registration: 1, Lookups: []*pb.LookupBatch{{ReqId: "r", Keys: [][]byte{key, key, key, key, key}}}}, codes.ResourceExhausted},
		{"too many items", &pb.StepRequest{Registration: 1, Finished: []string{"a", "b", "c"}, Preempted: []string{"d", "e"}}, codes.ResourceExhausted},
		{"job id 0", &pb.StepRequest{Registration: 1, Loads: []*pb.Job{{ReqId: "r", Keys: [][]byte{key}, ChunkIds: []uint32{0}}}}, codes.InvalidArgument},
		{"keys and chunks differ", &pb.StepRequest{Registration: 1, Loads: []*pb.Job{{JobId: 1, ReqId: "r", Keys: [][]byte{key}, ChunkIds: []uint32{0, 1}}}}, codes.InvalidArgument},
		{"chunk twice in a job", &pb.StepRequest{Registration: 1, Stores: []*pb.Job{{JobId: 1, ReqId: "r", Keys: [][]byte{key, key}, ChunkIds: []uint32{2, 2}}}}, codes.InvalidArgument},
		{"chunk in two loads", &pb.StepRequest{Registration: 1, Loads: []*pb.Job{
			{JobId: 1, ReqId: "r", Keys: [][]byte{key}, ChunkIds: []uint32{2}},
			{JobId: 2, ReqId: "r", Keys: [][]byte{key}, ChunkIds: []uint32{2}}}}, codes.InvalidArgument},
		{"chunk in a load and a store", &pb.StepRequest{Registration: 1,
			Loads:  []*pb.Job{{JobId: 1, ReqId: "r", Keys: [][]byte{key}, ChunkIds: []uint32{2}}},
			Stores: []*pb.Job{{JobId: 2, ReqId: "r", Keys: [][]byte{key}, ChunkIds: []uint32{2}}}}, codes.InvalidArgument},
		{"job id twice", &pb.StepRequest{Registration: 1,
			Loads:  []*pb.Job{{JobId: 1, ReqId: "r", Keys: [][]byte{key}, ChunkIds: []uint32{2}}},
			Stores: []*pb.Job{{JobId: 1, ReqId: "r", Keys: [][]byte{key}, ChunkIds: []uint32{3}}}}, codes.InvalidArgument},
		{"bad port", &pb.StepRequest{Registration: 1, NewRequests: []*pb.NewRequest{{ReqId: "r", Params: &pb.TransferParams{
			RemoteKvSource: &pb.Remote{Host: "h", Port: 70000}}}}}, codes.InvalidArgument},
		{"keys and keys_packed", &pb.StepRequest{Registration: 1, Lookups: []*pb.LookupBatch{{ReqId: "r", Keys: [][]byte{key}, KeysPacked: key}}}, codes.InvalidArgument},
		{"keys_packed not whole keys", &pb.StepRequest{Registration: 1, Lookups: []*pb.LookupBatch{{ReqId: "r", KeysPacked: key[:15]}}}, codes.InvalidArgument},
		{"too many packed keys", &pb.StepRequest{Registration: 1, Loads: []*pb.Job{{JobId: 1, ReqId: "r", KeysPacked: make([]byte, 5*KeyBytes), ChunkIds: []uint32{0, 1, 2, 3, 4}}}}, codes.ResourceExhausted},
		{"packed keys and chunks differ", &pb.StepRequest{Registration: 1, Loads: []*pb.Job{{JobId: 1, ReqId: "r", KeysPacked: make([]byte, 2*KeyBytes), ChunkIds: []uint32{0}}}}, codes.InvalidArgument},
		{"no host", &pb.StepRequest{Registration: 1, NewRequests: []*pb.NewRequest{{ReqId: "r", Params: &pb.TransferParams{
			RemotePrefiller: &pb.Remote{Port: 1}}}}}, codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			c := serve(t, f, Options{Limits: lim})
			_, err := c.Step(t.Context(), tc.req)
			if status.Code(err) != tc.want {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if f.steps != 0 {
				t.Fatal("a refused step reached the backend")
			}
		})
	}
	// And good ones do, a job's packed keys unpacked, a lookup's read
	// packed by LookupKeys.
	second := bytes.Repeat([]byte{7}, KeyBytes)
	packed := &pb.StepRequest{Registration: 1,
		Lookups: []*pb.LookupBatch{{ReqId: "r", KeysPacked: append(bytes.Clone(key), second...)}, {ReqId: "r", Keys: [][]byte{second, key}}},
		Loads:   []*pb.Job{{JobId: 1, ReqId: "r", KeysPacked: append(bytes.Clone(key), second...), ChunkIds: []uint32{0, 1}}}}
	if err := CheckStep(packed, DefaultLimits()); err != nil {
		t.Fatalf("packed keys: %v", err)
	}
	if j := packed.Loads[0]; len(j.Keys) != 2 || len(j.KeysPacked) != 0 || !bytes.Equal(j.Keys[1], second) {
		t.Fatalf("a job's packed keys not unpacked: %d keys, %d packed bytes", len(j.Keys), len(j.KeysPacked))
	}
	for i, want := range [][][]byte{{key, second}, {second, key}} {
		var got [][]byte
		LookupKeys(packed.Lookups[i], func(k []byte) { got = append(got, k) })
		if len(got) != 2 || !bytes.Equal(got[0], want[0]) || !bytes.Equal(got[1], want[1]) || cap(got[0]) != KeyBytes {
			t.Fatalf("lookups[%d]: LookupKeys gave %x, want %x", i, got, want)
		}
	}
	f := newFake()
	c := serve(t, f, Options{Limits: lim})
	resp, err := c.Step(t.Context(), &pb.StepRequest{Registration: 1, Lookups: []*pb.LookupBatch{{ReqId: "r", Keys: [][]byte{key}}}})
	if err != nil || !resp.PendingWork || f.steps != 1 {
		t.Fatalf("good step: %v %v steps=%d", resp, err, f.steps)
	}
}

// vLLM's remote_decoder names no host or port, only kv_request_id.
func TestStepDecoderWithoutAddress(t *testing.T) {
	f := newFake()
	c := serve(t, f, Options{})
	_, err := c.Step(t.Context(), &pb.StepRequest{Registration: 1, NewRequests: []*pb.NewRequest{{ReqId: "r",
		Params: &pb.TransferParams{RemoteDecoder: &pb.Remote{KvRequestId: "kv1"}}}}})
	if err != nil || f.steps != 1 {
		t.Fatalf("decoder without an address: %v steps=%d", err, f.steps)
	}
	_, err = c.Step(t.Context(), &pb.StepRequest{Registration: 1, NewRequests: []*pb.NewRequest{{ReqId: "r",
		Params: &pb.TransferParams{RemoteDecoder: &pb.Remote{Port: 1}}}}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("decoder with a port and no host: %v", err)
	}
}

func TestQueueOverflowEndsStream(t *testing.T) {
	q := newQueue()
	for range maxQueued + 1 {
		q.Post(&pb.SidecarMessage{})
	}
	if _, err := q.take(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("overflowed queue: %v", err)
	}
	q2 := newQueue()
	q2.Post(&pb.SidecarMessage{})
	if m, err := q2.take(); err != nil || len(m) != 1 {
		t.Fatalf("take: %v %v", m, err)
	}
	if m, _ := q2.take(); len(m) != 0 {
		t.Fatal("take twice returned messages twice")
	}
}

// attachRegistered opens an Attach stream, registers goodRegister and
// reads the sidecar's Registered.
func attachRegistered(t *testing.T, ctx context.Context, c pb.EngineClient) pb.Engine_AttachClient {
	t.Helper()
	st, err := c.Attach(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(goodRegister()); err != nil {
		t.Fatal(err)
	}
	if m, err := st.Recv(); err != nil || m.GetRegistered() == nil {
		t.Fatalf("registered: %v %v", m, err)
	}
	return st
}
