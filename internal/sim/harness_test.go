package sim

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/logtest"
	"github.com/kvp2p/kvp2p/internal/nodetest"

	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/wire"
)

const (
	prodID = "10.0.0.1:7777"
	consID = "10.0.0.2:7777"
	lat    = 100 * time.Microsecond
)

// logBuf collects log lines for assertions.
type logBuf = logtest.Buffer

type done struct {
	r  loads.JobResult
	at time.Time
}

// pair is a producer and a consumer on a network with 100 µs links.
type pair struct {
	t    *testing.T
	n    *Net
	p, c *Node
	log  *logBuf
	res  map[string]map[uint64]done
	tm   loads.Timers
	pol  string
}

func newPair(t *testing.T, policy string, tm *loads.Timers) *pair {
	f := &pair{t: t, n: NewNet(t0), log: &logBuf{}, res: map[string]map[uint64]done{}, pol: policy}
	f.n.Latency = lat
	f.n.OnResults = func(nd *Node, rs []loads.JobResult) {
		for _, r := range rs {
			if f.res[nd.ID] == nil {
				f.res[nd.ID] = map[uint64]done{}
			}
			f.res[nd.ID][r.Job] = done{r, f.n.Now}
		}
	}
	f.tm = loads.PresetTimers(policy)
	if tm != nil {
		f.tm = *tm
	}
	f.p = f.node(prodID)
	f.c = f.node(consID)
	return f
}

func (f *pair) node(id string) *Node {
	f.t.Helper()
	tm := f.tm
	nd, err := f.n.NewNode(id, NodeOpts{Policy: f.pol, Timers: &tm, Log: f.logger(id)})
	if err != nil {
		f.t.Fatal(err)
	}
	return nd
}

func (f *pair) logger(id string) *slog.Logger {
	return slog.New(slog.NewTextHandler(f.log, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", id)
}

func key(s string, i int) wire.Key {
	var k wire.Key
	copy(k[:], s)
	k[15] = byte(i)
	return k
}

func keysOf(s string, n int) []wire.Key {
	ks := make([]wire.Key, n)
	for i := range ks {
		ks[i] = key(s, i)
	}
	return ks
}

// store has the producer prefill kv's blocks and offer them (PD).
func (f *pair) store(kv string, ks []wire.Key) uint64 {
	f.t.Helper()
	p := f.n.Node(prodID)
	if err := p.T.NewRequest(f.n.Now, kv, loads.TransferParams{RemoteDecoder: &loads.Remote{KVRequestID: kv}}); err != nil {
		f.t.Fatal(err)
	}
	buf := make([]byte, p.Store.BlockBytes())
	for _, k := range ks {
		if _, err := p.Store.Put(k, content(buf, k)); err != nil {
			f.t.Fatal(err)
		}
	}
	j := p.T.SubmitStore(f.n.Now, kv, ks)
	p.T.RequestFinished(f.n.Now, kv)
	f.n.Flush(p)
	return j
}

// request registers a consumer request and returns its first verdict
// after d of virtual time (a session may need its handshake).
func (f *pair) request(kv string, params loads.TransferParams, d time.Duration) session.Verdict {
	f.t.Helper()
	if err := f.c.T.NewRequest(f.n.Now, kv, params); err != nil {
		f.t.Fatal(err)
	}
	f.n.Flush(f.c)
	f.n.Advance(d)
	v := f.c.T.Lookup(f.n.Now, kv, key(kv, 0))
	f.n.Flush(f.c)
	return v
}

// load submits a PD load of ks for kv and returns its job.
func (f *pair) load(kv string, ks []wire.Key) uint64 {
	f.t.Helper()
	if v := f.request(kv, nodetest.PDParams(f.t, kv, prodID), 10*time.Millisecond); v != session.Hit {
		f.t.Fatalf("lookup %s = %v, want HIT", kv, v)
	}
	j := f.c.T.SubmitLoad(f.n.Now, kv, ks)
	f.n.Flush(f.c)
	return j
}

func (f *pair) result(nd *Node, job uint64) (done, bool) {
	d, ok := f.res[nd.ID][job]
	return d, ok
}

func (f *pair) mustResult(nd *Node, job uint64) done {
	f.t.Helper()
	d, ok := f.result(nd, job)
	if !ok {
		f.t.Fatalf("%s: no result for job %d at %v", nd.ID, job, f.n.Now.Sub(t0))
	}
	return d
}

func (f *pair) noResult(nd *Node, job uint64) {
	f.t.Helper()
	if d, ok := f.result(nd, job); ok {
		f.t.Fatalf("%s: job %d ended already: %+v", nd.ID, job, d.r)
	}
}

func (f *pair) logHas(s string) bool { return strings.Contains(f.log.String(), s) }

// settled checks that a node holds no slot once everything is over.
func (f *pair) settled(nd *Node) {
	f.t.Helper()
	if err := nd.Store.Check(); err != nil {
		f.t.Fatal(err)
	}
	if st := nd.Store.Stats(); st.Filling != 0 || st.Pinned != 0 {
		f.t.Fatalf("%s: slots held: %+v", nd.ID, st)
	}
}
