package engineapi

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"path/filepath"
	"testing"

	pb "github.com/kvp2p/kvp2p/internal/engineapi/enginepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// serveWithSteps runs a Server on a Unix socket and its step socket, and
// returns a gRPC client and the step socket's path.
func serveWithSteps(t *testing.T, b Backend) (pb.EngineClient, string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "engine.sock")
	ln, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	sln, err := ListenUnix(StepSocketPath(sock))
	if err != nil {
		t.Fatal(err)
	}
	s := New(b, Options{})
	done := make(chan error, 2)
	go func() { done <- s.Serve(ln) }()
	go func() { done <- s.ServeSteps(sln) }()
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Close()
		s.Stop()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
		}
	})
	stepsServed(t, StepSocketPath(sock))
	return pb.NewEngineClient(cc), StepSocketPath(sock)
}

// stepsServed returns once the step socket at path answers, so that an
// Attach after it is told the socket.
func stepsServed(t *testing.T, path string) {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if code, _ := stepOver(t, c, bufio.NewReader(c), frameOf([]byte{0xff})); code != codes.InvalidArgument {
		t.Fatalf("step socket not serving: %v", code)
	}
}

// stepOver sends one frame and reads the answer: its code and body.
func stepOver(t *testing.T, c net.Conn, r *bufio.Reader, frame []byte) (codes.Code, []byte) {
	t.Helper()
	if _, err := c.Write(frame); err != nil {
		t.Fatal(err)
	}
	body, err := readFrame(r, 1<<30, nil)
	if err != nil || len(body) == 0 {
		t.Fatalf("answer: %v (%d bytes)", err, len(body))
	}
	return codes.Code(body[0]), body[1:]
}

func frameOf(b []byte) []byte {
	return append(binary.LittleEndian.AppendUint32(nil, uint32(len(b))), b...)
}

// The step socket answers what the gRPC Step answers: the backend's
// response, and the shape checks' refusals before the backend; garbage is
// INVALID_ARGUMENT; an oversized frame is RESOURCE_EXHAUSTED and ends the
// connection. An engine attached over the Unix socket is told its path.
func TestStepSocket(t *testing.T) {
	f := newFake()
	c, path := serveWithSteps(t, f)
	st, err := c.Attach(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(goodRegister()); err != nil {
		t.Fatal(err)
	}
	m, err := st.Recv()
	if err != nil || m.GetRegistered().GetStepSocket() != path {
		t.Fatalf("Registered %v (%v): want step_socket %s", m, err, path)
	}

	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	good, _ := proto.Marshal(&pb.StepRequest{Registration: 7, Lookups: []*pb.LookupBatch{{ReqId: "r", KeysPacked: make([]byte, 2*KeyBytes)}}})
	code, body := stepOver(t, conn, r, frameOf(good))
	var resp pb.StepResponse
	if code != codes.OK || proto.Unmarshal(body, &resp) != nil || !resp.PendingWork {
		t.Fatalf("good step: %v %q", code, body)
	}
	bad, _ := proto.Marshal(&pb.StepRequest{Registration: 7, Lookups: []*pb.LookupBatch{{ReqId: "r", Keys: [][]byte{{1, 2}}}}})
	if code, msg := stepOver(t, conn, r, frameOf(bad)); code != codes.InvalidArgument {
		t.Fatalf("short key: %v %s", code, msg)
	}
	if code, msg := stepOver(t, conn, r, frameOf([]byte{0xff, 0xff, 0xff})); code != codes.InvalidArgument {
		t.Fatalf("garbage: %v %s", code, msg)
	}
	f.mu.Lock()
	steps := f.steps
	f.mu.Unlock()
	if steps != 1 {
		t.Fatalf("backend saw %d steps, want only the good one", steps)
	}
	if code, msg := stepOver(t, conn, r, binary.LittleEndian.AppendUint32(nil, 1<<31)); code != codes.ResourceExhausted {
		t.Fatalf("oversized frame: %v %s", code, msg)
	}
	if _, err := r.ReadByte(); err != io.EOF {
		t.Fatalf("connection after an oversized frame: %v, want EOF", err)
	}
}

// FuzzStepFrame feeds the step socket's decoder any bytes: it answers or
// stops, never panics, and never allocates past the frame limit.
func FuzzStepFrame(f *testing.F) {
	good, _ := proto.Marshal(&pb.StepRequest{Registration: 7, Lookups: []*pb.LookupBatch{{ReqId: "r", KeysPacked: make([]byte, KeyBytes)}}})
	f.Add(frameOf(good))
	f.Add(frameOf([]byte{0xff}))
	f.Add(binary.LittleEndian.AppendUint32(nil, 1<<31))
	s := New(newFake(), Options{Limits: Limits{MaxKeysPerStep: 64, MaxItemsPerStep: 64, MaxIDBytes: 64}})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		var in, out []byte
		var dec stepDecoder
		for {
			var err error
			in, err = readFrame(r, s.maxMsg, in)
			if err != nil {
				return
			}
			out = s.answerStep(&dec, out[:0], in)
			if n := binary.LittleEndian.Uint32(out); int(n) != len(out)-4 || n == 0 {
				t.Fatalf("answer frame length %d for %d bytes", n, len(out)-4)
			}
		}
	})
}

// An engine attached over TCP (engine.addr, maybe another host) is not
// told the step socket: the path would name a file on the sidecar's host.
func TestStepSocketNotAdvertisedOverTCP(t *testing.T) {
	s := New(newFake(), Options{})
	sln, err := ListenUnix(StepSocketPath(filepath.Join(t.TempDir(), "engine.sock")))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	go func() { done <- s.ServeSteps(sln) }()
	go func() { done <- s.Serve(ln) }()
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cc.Close()
		s.Stop()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
		}
	}()
	stepsServed(t, sln.Addr().String())
	st, err := pb.NewEngineClient(cc).Attach(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(goodRegister()); err != nil {
		t.Fatal(err)
	}
	m, err := st.Recv()
	if err != nil || m.GetRegistered() == nil || m.GetRegistered().StepSocket != "" {
		t.Fatalf("Registered over TCP: %v %v, want no step_socket", m, err)
	}
}
