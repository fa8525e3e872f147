package demo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/kvp2p/kvp2p/internal/node"
)

// findIntro is the built-in demo's first part's story (format: nodes,
// interval, requests, documents, prefix blocks, own blocks).
const findIntro = `part 1, a fleet with no router: %d kvp2p nodes on 127.0.0.1 with find on, each summarising
what its store holds for the others (every %v). %d requests, each a shared document's %d-block
prefix (one of %d, some more popular) and %d blocks of its own, go to the nodes round-robin and
name no source. A node asks its peers' summaries who holds the prefix, loads it from that peer
over real TCP, checks it byte for byte, and computes the rest.
`

// FindOptions are the find part's settings; zero means the default.
type FindOptions struct {
	Nodes      int           // default 4
	Docs       int           // shared prefixes; default 6
	Prefix     int           // blocks of a shared prefix; default 8
	Own        int           // blocks of a request's own after it; default 2
	Requests   int           // default 48
	Gap        time.Duration // between two requests; default 40 ms
	Interval   time.Duration // find.interval; default 50 ms
	BlockBytes int           // default 16 KiB
}

func (o FindOptions) withDefaults() FindOptions {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.Nodes, 4)
	def(&o.Docs, 6)
	def(&o.Prefix, 8)
	def(&o.Own, 2)
	def(&o.Requests, 48)
	def(&o.BlockBytes, 16<<10)
	if o.Gap <= 0 {
		o.Gap = 40 * time.Millisecond
	}
	if o.Interval <= 0 {
		o.Interval = 50 * time.Millisecond
	}
	return o
}

// FindResult is what the find part measured.
type FindResult struct {
	Nodes, Requests int
	// Oracle: prefix blocks a router that knows every node's store at the
	// moment of each request would have had loaded from a peer (the
	// longest prefix any other node holds, beyond what the receiving node
	// holds). Found: those loaded from the peer the summaries named.
	Oracle, Found int
	Verified      int // of Found, read back equal byte for byte
	Fallbacks     int // a found peer answered HIT but the load failed: computed instead
	InVain        int // a found peer answered MISS (a summary's false positive, or stale)
	Took          time.Duration
}

// Print writes the part's figures as a small table.
func (r FindResult) Print(w io.Writer) {
	share := ""
	if r.Oracle > 0 {
		share = fmt.Sprintf("  (%.0f%% of the oracle's)", 100*float64(r.Found)/float64(r.Oracle))
	}
	fmt.Fprintf(w, "  prefix blocks loaded from peers the summaries found     %5d%s\n", r.Found, share)
	fmt.Fprintf(w, "  ... an oracle that knows every cache would have loaded  %5d\n", r.Oracle)
	fmt.Fprintf(w, "  verified byte for byte                                  %5d of %d\n", r.Verified, r.Found)
	fmt.Fprintf(w, "  fallbacks (a found peer's load failed: computed)        %5d\n", r.Fallbacks)
	fmt.Fprintf(w, "  peers asked in vain (they answered MISS)                %5d\n", r.InVain)
	fmt.Fprintf(w, "  %d requests on %d nodes in %v\n", r.Requests, r.Nodes, r.Took.Round(100*time.Millisecond))
}

// findFleet is the find part's nodes, on 127.0.0.1 with real TCP.
type findFleet struct {
	nodes []*node.Node
	ms    []*node.Manager
	held  []map[node.Key]bool // what each node's store holds: the oracle's view
	serve []chan error
}

func startFindFleet(o FindOptions) (*findFleet, error) {
	f := &findFleet{}
	lns := make([]net.Listener, o.Nodes)
	ids := make([]string, o.Nodes)
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			f.close()
			for _, l := range lns[:i] {
				l.Close()
			}
			return nil, err
		}
		lns[i], ids[i] = ln, ln.Addr().String()
	}
	slots := o.Docs*o.Prefix + o.Requests*o.Own + 64
	for i, ln := range lns {
		n, err := node.New(node.Config{PeerID: ids[i], BlockBytes: o.BlockBytes, Slots: slots, HashSeed: "demo",
			// A summary counts as fresh for 20 intervals, not 3: on a busy
			// machine the loops lag, and this part shows finding, not
			// freshness (what an interval costs is docs/find.md's).
			Find: node.FindConfig{Enabled: true, Peers: strings.Join(ids, ","), Interval: o.Interval, MaxAge: 20 * o.Interval}})
		if err != nil {
			f.close()
			for _, l := range lns[i:] {
				l.Close()
			}
			return nil, err
		}
		ch := make(chan error, 1)
		go func() { ch <- n.Serve(ln) }()
		f.nodes, f.ms, f.serve = append(f.nodes, n), append(f.ms, n.Manager()), append(f.serve, ch)
		f.held = append(f.held, map[node.Key]bool{})
	}
	return f, nil
}

// close stops every node and waits for it.
func (f *findFleet) close() {
	for _, n := range f.nodes {
		n.Close()
	}
	for _, ch := range f.serve {
		<-ch
	}
}

// waitMesh waits, up to limit, until every node uses every other's summary:
// the sessions and first snapshots take a few intervals.
func (f *findFleet) waitMesh(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for _, n := range f.nodes {
		for {
			s, err := n.Status(ctx)
			if err != nil {
				return err
			}
			if s.Find.PeersUsable == len(f.nodes)-1 || time.Now().After(deadline) {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	return nil
}

// prefix is how many of keys node i holds, from the first.
func (f *findFleet) prefix(i int, keys []node.Key) int {
	n := 0
	for n < len(keys) && f.held[i][keys[n]] {
		n++
	}
	return n
}

// RunFind runs the find part: requests round-robin over a fleet with find
// on, none naming a source, each loading what a found peer holds and
// computing the rest, against an oracle that knows every store.
func RunFind(ctx context.Context, o FindOptions) (FindResult, error) {
	o = o.withDefaults()
	start := time.Now()
	f, err := startFindFleet(o)
	if err != nil {
		return FindResult{}, err
	}
	defer f.close()
	if err := f.waitMesh(ctx, 5*time.Second); err != nil {
		return FindResult{}, err
	}
	res := FindResult{Nodes: o.Nodes, Requests: o.Requests}
	rng := rand.New(rand.NewPCG(33, 1))
	popular := rand.NewZipf(rng, 1.3, 1, uint64(o.Docs-1))
	want, got := make([]byte, o.BlockBytes), make([]byte, 0, o.BlockBytes)
	for i := range o.Requests {
		keys := make([]node.Key, 0, o.Prefix+o.Own)
		doc := byte(popular.Uint64())
		for b := range o.Prefix {
			keys = append(keys, node.Key{'d', doc, byte(b)})
		}
		for b := range o.Own {
			keys = append(keys, node.Key{'o', byte(i), byte(i >> 8), byte(b)})
		}
		x := i % o.Nodes
		local, best := f.prefix(x, keys), 0
		for y := range f.nodes {
			if y != x {
				best = max(best, f.prefix(y, keys))
			}
		}
		res.Oracle += max(0, best-local)
		loaded, out := f.load(ctx, x, "req-"+strconv.Itoa(i), keys, local)
		switch out {
		case loadFailed:
			res.Fallbacks++
		case askedInVain:
			res.InVain++
		}
		for _, k := range keys[local : local+loaded] {
			g, ok := f.ms[x].ReadBlockInto(got[:0], k)
			if ok && bytes.Equal(g, blockContent(want, k)) {
				res.Verified++
			}
			f.held[x][k] = true
		}
		res.Found += loaded
		for _, k := range keys[local+loaded:] { // the engine computes them
			if err := f.ms[x].PutBlock(k, blockContent(want, k)); err != nil {
				return res, err
			}
			f.held[x][k] = true
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(o.Gap):
		}
	}
	res.Took = time.Since(start)
	return res, nil
}

// How a request's load from a found peer went.
const (
	notFound    = iota // no summary names a peer
	loadedOK           // loaded what the peer said it holds
	askedInVain        // the peer answered MISS at once
	loadFailed         // the load failed: the engine computes it
)

// load asks node x's summaries for a source of keys beyond the local ones,
// then runs the ordinary symmetric lookup and load against it, as the tier
// plugin does. It returns how many blocks after local it loaded.
func (f *findFleet) load(ctx context.Context, x int, req string, keys []node.Key, local int) (int, int) {
	m := f.ms[x]
	found, ok := m.FindSource(keys, local)
	if !ok {
		return 0, notFound
	}
	host, p, _ := net.SplitHostPort(found.Peer)
	port, _ := strconv.Atoi(p)
	if m.NewRequest(req, node.TransferParams{RemoteKVSource: &node.Remote{KVRequestID: req, RemoteHost: host, RemotePort: port}}) != nil {
		return 0, loadFailed
	}
	defer m.RequestFinished(req)
	rest := keys[local:]
	for _, k := range rest {
		m.Lookup(req, k)
	}
	m.EndStep()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	hits := 0
	for _, k := range rest {
		if m.LookupWait(wctx, req, k) != node.Hit {
			break
		}
		hits++
	}
	if hits == 0 {
		return 0, askedInVain
	}
	job, err := m.SubmitLoad(req, rest[:hits])
	if err != nil {
		return 0, loadFailed
	}
	for wctx.Err() == nil {
		for _, r := range m.WaitFinished(wctx) {
			if r.Job == job {
				if !r.OK {
					return 0, loadFailed
				}
				return hits, loadedOK
			}
		}
	}
	return 0, loadFailed
}
