package loads_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/logtest"

	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/sim"
	"github.com/kvp2p/kvp2p/internal/wire"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const blockBytes = 4096

// content is the deterministic bytes of a block.
func content(k wire.Key) []byte {
	b := make([]byte, blockBytes)
	for i := range b {
		b[i] = k[i%wire.KeySize] ^ byte(i)
	}
	return b
}

// logBuf collects log lines for assertions.
type logBuf = logtest.Buffer

type fleet struct {
	t   testing.TB
	net *sim.Net
	log *logBuf
}

func newFleet(t testing.TB) *fleet {
	f := &fleet{t: t, net: sim.NewNet(t0), log: &logBuf{}}
	if _, bench := t.(*testing.B); !bench {
		f.net.CheckTimers = true // a full scan per tick: not in a benchmark
		f.net.CheckSkips = true
	}
	t.Cleanup(func() {
		if err := f.net.TimerError(); err != nil {
			t.Errorf("timer queues: %v", err)
		}
		if err := f.net.SkipError(); err != nil {
			t.Errorf("skipped ticks: %v", err)
		}
	})
	return f
}

func (f *fleet) node(id string, o sim.NodeOpts) *sim.Node {
	f.t.Helper()
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(f.log, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", id)
	}
	nd, err := f.net.NewNode(id, o)
	if err != nil {
		f.t.Fatal(err)
	}
	return nd
}

// put writes blocks into a node's store as its engine would.
func (f *fleet) put(nd *sim.Node, ks []wire.Key) {
	f.t.Helper()
	for _, k := range ks {
		if _, err := nd.Store.Put(k, content(k)); err != nil {
			f.t.Fatal(err)
		}
	}
}

// result returns the node's result for job, removing it; ok=false if none yet.
func result(nd *sim.Node, job uint64) (loads.JobResult, bool) {
	for i, r := range nd.Results {
		if r.Job == job {
			nd.Results = append(nd.Results[:i], nd.Results[i+1:]...)
			return r, true
		}
	}
	return loads.JobResult{}, false
}

func (f *fleet) mustResult(nd *sim.Node, job uint64) loads.JobResult {
	f.t.Helper()
	f.net.Run()
	r, ok := result(nd, job)
	if !ok {
		f.t.Fatalf("%s: no result for job %d", nd.ID, job)
	}
	return r
}

func (f *fleet) noResult(nd *sim.Node, job uint64) {
	f.t.Helper()
	f.net.Run()
	for _, r := range nd.Results {
		if r.Job == job {
			f.t.Fatalf("%s: job %d has a result already: %+v", nd.ID, job, r)
		}
	}
}

// verify checks that a consumer holds the right bytes for every key.
func (f *fleet) verify(nd *sim.Node, ks []wire.Key) {
	f.t.Helper()
	for _, k := range ks {
		sl, ok := nd.Store.Lookup(k)
		if !ok {
			f.t.Fatalf("%s: key %x not loaded", nd.ID, k[:4])
		}
		if !bytes.Equal(nd.Store.Bytes(sl), content(k)) {
			f.t.Fatalf("%s: key %x loaded with wrong bytes", nd.ID, k[:4])
		}
	}
}

// settle checks the store invariants and that no slot is left filling or
// pinned once everything is over.
func (f *fleet) settled(nd *sim.Node) {
	f.t.Helper()
	if err := nd.Store.Check(); err != nil {
		f.t.Fatalf("%s: store: %v", nd.ID, err)
	}
	st := nd.Store.Stats()
	if st.Filling != 0 || st.Pinned != 0 {
		f.t.Fatalf("%s: leaked slots: %+v", nd.ID, st)
	}
}

func pd(kv, host string, port int) loads.TransferParams {
	return loads.TransferParams{RemotePrefiller: &loads.Remote{KVRequestID: kv, RemoteHost: host, RemotePort: port}}
}

func sym(kv, host string, port int) loads.TransferParams {
	return loads.TransferParams{RemoteKVSource: &loads.Remote{KVRequestID: kv, RemoteHost: host, RemotePort: port}}
}

func decoder(kv string) loads.TransferParams {
	return loads.TransferParams{RemoteDecoder: &loads.Remote{KVRequestID: kv}}
}

// connect opens a ready session from consumer c to peer by a throwaway
// request, and finishes it.
func (f *fleet) connect(c *sim.Node, host string, port int) {
	f.t.Helper()
	id := fmt.Sprintf("warm-%s-%d", host, port)
	if err := c.T.NewRequest(f.net.Now, id, pd(id, host, port)); err != nil {
		f.t.Fatal(err)
	}
	f.net.Run()
	c.T.RequestFinished(f.net.Now, id)
	f.net.Run()
}
