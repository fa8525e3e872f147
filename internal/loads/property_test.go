package loads_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/sim"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// The exactly-one-result property: over random interleavings of PD and
// symmetric requests, stores, loads, finishes, resets, data blackholes,
// paused processes and the passage of time, every load and store job gets
// exactly one terminal result, an OK load carries all its bytes, and once
// everything settles no slot is left Filling or pinned on any node.

type propReq struct {
	kv       string
	consumer *sim.Node
	producer *sim.Node
	pd       bool
	keys     []wire.Key
	stored   int // PD: keys submitted as stores so far
	cDone    bool
	pDone    bool
}

type propJob struct {
	node *sim.Node
	load bool
	n    int // blocks
}

type propRun struct {
	t     *testing.T
	f     *fleet
	rng   *rand.Rand
	nodes []*sim.Node
	reqs  []*propReq
	jobs  map[*sim.Node]map[uint64]propJob
	down  map[*sim.Node]bool // shut down
	opts  sim.NodeOpts
	inc   uint64
	next  int
	// batch: look a request's keys up with one LookupBatch, not a
	// Lookup per key; trace, if set, records every verdict.
	batch bool
	trace *strings.Builder
}

func (pr *propRun) job(nd *sim.Node, id uint64, load bool, n int) {
	if _, dup := pr.jobs[nd][id]; dup {
		pr.t.Fatalf("%s: job id %d handed out twice", nd.ID, id)
	}
	pr.jobs[nd][id] = propJob{node: nd, load: load, n: n}
}

func (pr *propRun) pick() *sim.Node { return pr.nodes[pr.rng.IntN(len(pr.nodes))] }

func (pr *propRun) hostPort(nd *sim.Node) (string, int) { return nodetest.SplitPeer(pr.t, nd.ID) }

func (pr *propRun) put(nd *sim.Node, ks []wire.Key) bool {
	for _, k := range ks {
		if _, err := nd.Store.Put(k, content(k)); err != nil {
			return false // full of pins and fills: the engine would skip it
		}
	}
	return true
}

func (pr *propRun) newRequest() {
	c, p := pr.pick(), pr.pick()
	for p == c {
		p = pr.pick()
	}
	pr.next++
	r := &propReq{kv: fmt.Sprintf("kv%d", pr.next), consumer: c, producer: p, pd: pr.rng.IntN(2) == 0}
	r.keys = nodetest.Keys(r.kv, 1+pr.rng.IntN(6))
	host, port := pr.hostPort(p)
	now := pr.f.net.Now
	if r.pd {
		p.T.NewRequest(now, "p-"+r.kv, decoder(r.kv))
		c.T.NewRequest(now, "c-"+r.kv, pd(r.kv, host, port))
	} else {
		pr.put(p, r.keys[:pr.rng.IntN(len(r.keys)+1)])
		c.T.NewRequest(now, "c-"+r.kv, sym(r.kv, host, port))
		r.pDone = true
	}
	pr.reqs = append(pr.reqs, r)
}

func (pr *propRun) some() *propReq {
	if len(pr.reqs) == 0 {
		return nil
	}
	if n := min(len(pr.reqs), 4); pr.rng.IntN(4) > 0 {
		return pr.reqs[len(pr.reqs)-1-pr.rng.IntN(n)] // mostly the recent ones
	}
	return pr.reqs[pr.rng.IntN(len(pr.reqs))]
}

func (pr *propRun) store(r *propReq) {
	if !r.pd || r.pDone || r.stored == len(r.keys) {
		return
	}
	n := 1 + pr.rng.IntN(len(r.keys)-r.stored)
	ks := r.keys[r.stored : r.stored+n]
	if !pr.put(r.producer, ks) {
		return
	}
	r.stored += n
	pr.job(r.producer, r.producer.T.SubmitStore(pr.f.net.Now, "p-"+r.kv, ks), false, n)
}

func (pr *propRun) lookupAndLoad(r *propReq) {
	if r.cDone {
		return
	}
	now := pr.f.net.Now
	vs := make([]session.Verdict, len(r.keys))
	if pr.batch {
		r.consumer.T.LookupBatch(now, "c-"+r.kv, r.keys, vs)
	} else {
		for i, k := range r.keys {
			vs[i] = r.consumer.T.Lookup(now, "c-"+r.kv, k)
		}
	}
	var hits []wire.Key
	for i, v := range vs {
		if v == session.Hit {
			hits = append(hits, r.keys[i])
		}
	}
	if pr.trace != nil {
		fmt.Fprintf(pr.trace, "%d %s %v\n", now.UnixNano(), r.kv, vs)
	}
	r.consumer.T.EndStep(now)
	if len(hits) > 0 && pr.rng.IntN(4) > 0 {
		pr.job(r.consumer, r.consumer.T.SubmitLoad(now, "c-"+r.kv, hits), true, len(hits))
	}
}

func (pr *propRun) finish(r *propReq, consumer bool) {
	if consumer && !r.cDone {
		r.cDone = true
		r.consumer.T.RequestFinished(pr.f.net.Now, "c-"+r.kv)
	} else if !consumer && !r.pDone {
		r.pDone = true
		r.producer.T.RequestFinished(pr.f.net.Now, "p-"+r.kv)
	}
}

func (pr *propRun) step() {
	switch x := pr.rng.IntN(100); {
	case x < 10:
		pr.newRequest()
	case x < 35:
		if r := pr.some(); r != nil {
			pr.store(r)
		}
	case x < 70:
		if r := pr.some(); r != nil {
			pr.lookupAndLoad(r)
		}
	case x < 78:
		if r := pr.some(); r != nil {
			pr.finish(r, pr.rng.IntN(2) == 0)
		}
	case x < 79:
		pr.f.net.CloseControl(pr.pick().ID)
	case x < 80:
		pr.pick().DataBlackhole = true
	case x < 81:
		pr.pick().Silent = true
	case x < 85:
		nd := pr.pick()
		nd.Silent, nd.DataBlackhole = false, false
	case x == 86 && pr.rng.IntN(2) == 0:
		pr.restart(pr.rng.IntN(len(pr.nodes)))
	case x == 85 && pr.rng.IntN(4) == 0:
		nd := pr.pick()
		pr.down[nd] = true
		nd.T.Shutdown(pr.f.net.Now)
	default:
		pr.f.net.Advance(time.Duration(1+pr.rng.IntN(100)) * 10 * time.Millisecond)
	}
	pr.f.net.Run()
}

// restart crashes node i and starts a new incarnation in its place. What
// the dead process owed its own engine dies with it; its peers must settle
// everything they had with it.
func (pr *propRun) restart(i int) {
	old := pr.nodes[i]
	pr.f.net.Crash(old.ID)
	pr.inc++
	o := pr.opts
	o.Incarnation = pr.inc
	o.Log = slog.New(slog.NewTextHandler(pr.f.log, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", old.ID)
	nd, err := pr.f.net.Replace(old, o)
	if err != nil {
		pr.t.Fatal(err)
	}
	pr.nodes[i] = nd
	pr.jobs[nd] = map[uint64]propJob{}
	delete(pr.jobs, old)
	for _, r := range pr.reqs {
		if r.consumer == old {
			r.consumer, r.cDone = nd, true
		}
		if r.producer == old {
			r.producer, r.pDone = nd, true
		}
	}
}

func (pr *propRun) settle() {
	for _, nd := range pr.nodes {
		nd.Silent, nd.DataBlackhole = false, false
	}
	for _, r := range pr.reqs {
		pr.finish(r, true)
		pr.finish(r, false)
	}
	pr.f.net.Run()
	pr.f.net.Advance(3 * time.Minute) // past every timer: load, abort-ack, store, unbound, heartbeat
}

func (pr *propRun) check() {
	t := pr.t
	for _, nd := range pr.nodes {
		seen := map[uint64]int{}
		for _, r := range nd.Results {
			j, ok := pr.jobs[nd][r.Job]
			if !ok {
				t.Fatalf("%s: result for a job never submitted: %+v", nd.ID, r)
			}
			seen[r.Job]++
			if seen[r.Job] > 1 {
				t.Fatalf("%s: second result for job %d: %+v", nd.ID, r.Job, r)
			}
			if j.load && r.OK && r.Bytes != uint64(j.n)*blockBytes {
				t.Fatalf("%s: OK load %d with %d bytes, want %d", nd.ID, r.Job, r.Bytes, j.n*blockBytes)
			}
		}
		for id, j := range pr.jobs[nd] {
			if seen[id] == 0 {
				t.Fatalf("%s: job %d (load=%v) has no result", nd.ID, id, j.load)
			}
		}
		if err := nd.Store.Check(); err != nil {
			t.Fatalf("%s: %v", nd.ID, err)
		}
		if st := nd.Store.Stats(); st.Filling != 0 || st.Pinned != 0 {
			t.Fatalf("%s: slots left filling or pinned: %+v", nd.ID, st)
		}
		if pr.down[nd] && !nd.T.Drained() {
			t.Fatalf("%s: shut down but not drained", nd.ID)
		}
		for _, r := range pr.reqs {
			for _, k := range r.keys {
				if sl, ok := nd.Store.Lookup(k); ok && !bytes.Equal(nd.Store.Bytes(sl), content(k)) {
					t.Fatalf("%s: block %x holds wrong bytes", nd.ID, k[:4])
				}
			}
		}
	}
}

type propConfig struct {
	name   string
	policy string
	timers *loads.Timers
}

func propConfigs() []propConfig {
	kvp2p := loads.KVP2PTimers()
	kvp2p.StallTimeout = 0 // the sim sends no periodic Progress frames
	return []propConfig{
		{"per-peer", health.PerPeer, nil},
		{"host-group", health.HostGroup, nil},
		{"kvp2p-timers", health.PerPeer, &kvp2p},
		{"domain", health.Domain, &kvp2p},
	}
}

// runProp runs 300 random steps and settles; set, if not nil, adjusts
// the run before it starts.
func runProp(t *testing.T, cfg propConfig, seed int, set func(*propRun)) *propRun {
	f := newFleet(t)
	pr := &propRun{t: t, f: f, rng: rand.New(rand.NewPCG(uint64(seed), 7)), jobs: map[*sim.Node]map[uint64]propJob{}, down: map[*sim.Node]bool{},
		opts: sim.NodeOpts{Policy: cfg.policy, Timers: cfg.timers, Slots: 512}, inc: 1}
	if set != nil {
		set(pr)
	}
	for _, id := range []string{"10.0.0.1:7777", "10.0.0.1:7778", "10.0.0.2:7777"} {
		nd := f.node(id, pr.opts)
		pr.nodes = append(pr.nodes, nd)
		pr.jobs[nd] = map[uint64]propJob{}
	}
	for i := 0; i < 300; i++ {
		pr.step()
	}
	pr.settle()
	return pr
}

func TestEveryJobGetsExactlyOneResult(t *testing.T) {
	seeds := 12
	if testing.Short() {
		seeds = 3
	}
	for _, cfg := range propConfigs() {
		var total propStats
		for seed := 1; seed <= seeds; seed++ {
			t.Run(fmt.Sprintf("%s/seed=%d", cfg.name, seed), func(t *testing.T) {
				pr := runProp(t, cfg, seed, nil)
				pr.check()
				total.add(pr.stats())
			})
		}
		// Not vacuous: the runs must have seen both outcomes of both kinds.
		if total.loadOK == 0 || total.loadFail == 0 || total.storeOK == 0 || total.storeFail == 0 {
			t.Fatalf("%s: the runs exercised too little: %+v", cfg.name, total)
		}
	}
}

type propStats struct{ loadOK, loadFail, storeOK, storeFail int }

func (a *propStats) add(b propStats) {
	a.loadOK += b.loadOK
	a.loadFail += b.loadFail
	a.storeOK += b.storeOK
	a.storeFail += b.storeFail
}

func (pr *propRun) stats() propStats {
	var st propStats
	for _, nd := range pr.nodes {
		for _, r := range nd.Results {
			switch j := pr.jobs[nd][r.Job]; {
			case j.load && r.OK:
				st.loadOK++
			case j.load:
				st.loadFail++
			case r.OK:
				st.storeOK++
			default:
				st.storeFail++
			}
		}
	}
	return st
}
