package nodetest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/nodetest/testkeys"
	"github.com/kvp2p/kvp2p/internal/proccpu"
	"github.com/kvp2p/kvp2p/internal/testpki"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// BlockBytes is the block size of the tests' nodes: small enough that a
// test moves many blocks quickly, larger than one data-path piece.
const BlockBytes = 64 << 10

// Key is block i of prefix p's keys (testkeys.Key).
func Key(p string, i int) wire.Key { return testkeys.Key(p, i) }

// Keys is Key(p, 0) to Key(p, n-1).
func Keys(p string, n int) []wire.Key { return testkeys.Keys(p, n) }

// Bytes is k's block of BlockBytes: a pattern that differs per key and
// per offset, so a block copied to the wrong place or shifted is seen.
func Bytes(k wire.Key) []byte {
	b := make([]byte, BlockBytes)
	for i := range b {
		b[i] = k[i%len(k)] + byte(i/7)
	}
	return b
}

// SplitPeer splits a peer id "host:port"; a malformed id fails the test.
func SplitPeer(tb testing.TB, id string) (string, int) {
	tb.Helper()
	h, p, err := net.SplitHostPort(id)
	if err != nil {
		tb.Fatal(err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		tb.Fatal(err)
	}
	return h, port
}

// PDParams are a decoder's params for a PD load of request kv from the
// prefiller at peer ("host:port").
func PDParams(tb testing.TB, kv, peer string) loads.TransferParams {
	return loads.TransferParams{RemotePrefiller: remote(tb, kv, peer)}
}

// SymParams are the params of a symmetric load of kv's blocks from the
// source at peer ("host:port").
func SymParams(tb testing.TB, kv, peer string) loads.TransferParams {
	return loads.TransferParams{RemoteKVSource: remote(tb, kv, peer)}
}

func remote(tb testing.TB, kv, peer string) *loads.Remote {
	tb.Helper()
	host, port := SplitPeer(tb, peer)
	return &loads.Remote{KVRequestID: kv, RemoteHost: host, RemotePort: port}
}

// PeerDown is the log line a node writes when its session to peer ends
// by cause.
func PeerDown(node, peer, cause string) string {
	return fmt.Sprintf(`msg="peer down" node=%s peer=%s cause=%s`, node, peer, cause)
}

// WaitFor polls cond every 5 ms until it holds, for at most 5 s.
func WaitFor(tb testing.TB, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatal("condition not reached")
		}
		<-time.After(5 * time.Millisecond)
	}
}

// Finisher is a node's manager: the calls that report settled jobs.
type Finisher interface {
	WaitFinished(ctx context.Context) []loads.JobResult
}

// WaitJob waits on m until job's result (WaitFinished), for at most 30 s:
// a benchmark times the load to the loop turn that settled it, as raw
// TCP's copy is timed to its reader's return.
func WaitJob(tb testing.TB, m Finisher, job uint64) loads.JobResult {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		for _, r := range m.WaitFinished(ctx) {
			if r.Job == job {
				return r
			}
		}
		if ctx.Err() != nil {
			tb.Fatalf("job %d: no result within 30 s", job)
		}
	}
}

// Server is a node: it serves a listener until Close.
type Server interface {
	Serve(ln net.Listener) error
	Close() error
}

// Start listens on a fresh loopback port, builds a node with newNode
// (its peer id is the port's address), serves it, and at cleanup closes
// it and checks that Serve returned no error.
func Start[S Server](tb testing.TB, newNode func(peerID string) (S, error)) S {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	n, err := newNode(ln.Addr().String())
	if err != nil {
		ln.Close()
		tb.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- n.Serve(ln) }()
	tb.Cleanup(func() {
		n.Close()
		if err := <-served; err != nil {
			tb.Errorf("serve: %v", err)
		}
	})
	return n
}

// Frame is m encoded as it travels on a connection.
func Frame(tb testing.TB, m wire.Message) []byte {
	tb.Helper()
	b, err := wire.Append(nil, m)
	if err != nil {
		tb.Fatalf("Append(%T): %v", m, err)
	}
	return b
}

// ChunkFrame is a data chunk c carrying payload, its CRC set.
func ChunkFrame(c wire.Chunk, payload []byte) []byte {
	c.CRC = wire.CRC32C(payload)
	return append(wire.AppendChunkHeader(nil, &c), payload...)
}

// PieceSums are the CRC32C sums of p's pieces of piece bytes (the last
// one may be shorter), as a data path stores them beside a block.
func PieceSums(p []byte, piece int) []uint32 {
	var s []uint32
	for off := 0; off < len(p); off += piece {
		s = append(s, wire.CRC32C(p[off:min(off+piece, len(p))]))
	}
	return s
}

// CPUTime is the CPU time (user and system) this process has used so far.
// Zero where the kernel would not say.
func CPUTime() time.Duration {
	d, _ := proccpu.Used()
	return d
}

// WriteConfig writes a kvp2p.yaml holding yaml to a fresh temporary
// directory and returns its path.
func WriteConfig(tb testing.TB, yaml string) string {
	tb.Helper()
	p := filepath.Join(tb.TempDir(), "kvp2p.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		tb.Fatal(err)
	}
	return p
}

// TLSFleet writes certificates signed by one test CA into a test's
// temporary directory.
type TLSFleet struct {
	CA  *testpki.CA
	dir string
	n   int // files written
}

// NewTLSFleet makes a fresh CA.
func NewTLSFleet(tb testing.TB) *TLSFleet {
	tb.Helper()
	ca, err := testpki.NewCA("kvp2p test CA")
	if err != nil {
		tb.Fatal(err)
	}
	return &TLSFleet{CA: ca, dir: tb.TempDir()}
}

// Files writes a certificate for names, its key and the CA's certificate,
// and returns their paths.
func (f *TLSFleet) Files(tb testing.TB, names ...string) testpki.Files {
	tb.Helper()
	f.n++
	fs, err := f.CA.WriteFiles(f.dir, fmt.Sprint("node", f.n), names...)
	if err != nil {
		tb.Fatal(err)
	}
	return fs
}
