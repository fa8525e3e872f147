package sim

import (
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/report"
	"github.com/kvp2p/kvp2p/internal/scenario"
	"github.com/kvp2p/kvp2p/internal/wire"
	"github.com/kvp2p/kvp2p/internal/workload"
)

// Options tunes a run. The zero value is the defaults noted per field.
type Options struct {
	Seed         int64         // 0: the scenario's seed
	Latency      time.Duration // one-way link latency; default 100µs
	Bandwidth    int64         // per-node outgoing data bytes/s; default 10 GB/s
	Tick         time.Duration // timer and engine-step granularity; default 10ms
	IdleTick     time.Duration // tick of nodes with nothing in flight; default 100ms
	PrefillDelay time.Duration // PD: arrival to SubmitStore on the source; default 20ms
	Warmup       time.Duration // sessions opened before time 0; default 1s
	NoWarmup     bool          // start cold (large fleets: every pair would be a session)
	StoreBlock   int           // bytes a block holds in the sim's stores; default 64 (timing uses the scenario's block_bytes)
	Slots        int           // store slots of consumer ranks; default 16384
	SourceSlots  int           // store slots of the other ranks; default 4096
	Timers       *loads.Timers // nil: TimerSet's
	// TimerSet is "vllm" or "kvp2p" (loads.VLLMTimers, loads.KVP2PTimers);
	// empty: the policy's preset. Under "vllm" the network also behaves as
	// vLLM's transport does (see the package doc): a refused dial is not an
	// event, and a load that times out faults its session (vLLM #64251).
	TimerSet string
	// DropDomains removes every pod's domain label from the nodes and from
	// the requests' remote_domain (the report still judges by the
	// scenario's pods): domain without failure domains.
	DropDomains bool
	MaxDrain    time.Duration // virtual time allowed for the final shutdown; default 2m
	Log         *slog.Logger  // nil: discard
	Workers     int           // goroutines for the tick of a large fleet; default GOMAXPROCS (results do not depend on it)

	// leakAt, when set (tests), drops a release at that time: one slot of
	// the first consumer is reserved for no job, as a table that forgot to
	// free a failed load's slot would leave it.
	leakAt time.Duration
	// checkTimers (tests) has every table check its timer queues against
	// a full scan on every tick (loads.Config.CheckTimers).
	checkTimers bool
	// tickEvery (tests) ticks every node at every grid point it is a
	// candidate at (Net.TickEvery); checkSkips checks the skipped ones
	// (Net.CheckSkips).
	tickEvery, checkSkips bool
}

// Timer set names (Options.TimerSet).
const (
	TimersVLLM  = "vllm"
	TimersKVP2P = "kvp2p"
)

// resolveTimers returns the timers of a run and the name of their set.
func resolveTimers(policy string, o Options) (loads.Timers, string, error) {
	set := o.TimerSet
	if set == "" {
		set = TimersKVP2P
		if policy == health.PerPeer || policy == health.HostGroup {
			set = TimersVLLM
		}
	}
	var t loads.Timers
	switch set {
	case TimersVLLM:
		t = loads.VLLMTimers()
	case TimersKVP2P:
		t = loads.KVP2PTimers()
	default:
		return t, "", fmt.Errorf("sim: timer set %q: want %s or %s", set, TimersVLLM, TimersKVP2P)
	}
	if o.Timers != nil {
		t = *o.Timers
	}
	return t, set, nil
}

func (o *Options) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.Latency, 100*time.Microsecond)
	def(&o.Tick, 10*time.Millisecond)
	def(&o.IdleTick, 100*time.Millisecond)
	def(&o.PrefillDelay, 20*time.Millisecond)
	def(&o.Warmup, time.Second)
	def(&o.MaxDrain, 2*time.Minute)
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.Bandwidth <= 0 {
		o.Bandwidth = 10_000_000_000
	}
	if o.StoreBlock <= 0 {
		o.StoreBlock = 64
	}
	if o.Slots <= 0 {
		o.Slots = 16384
	}
	if o.SourceSlots <= 0 {
		o.SourceSlots = 4096
	}
}

// Result is one (scenario, policy) run.
type Result struct {
	Requests []report.Request // in arrival order per engine step
	Report   report.Report
	Leaked   int    // slots still Filling or Pinned after the drain
	Peak     int    // most slots Filling or Pinned at once, at engine steps
	Orphans  int    // most of them at once that no job, pin or parked store owned
	TimerSet string // the timer set the run used
	// QueuedAcks counts probe answers that left behind queued block bytes.
	QueuedAcks uint64
	Drained    bool   // every table drained within MaxDrain
	Events     uint64 // simulator events fired
	Ticks      uint64 // Table.Tick calls
	Nodes      int

	timerErr error // Options.checkTimers: the first table's finding
	skipErr  error // Options.checkSkips: the first finding
}

// t0 is the virtual clock's origin (any fixed instant: runs are
// reproducible to the nanosecond).
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Run simulates sc under policy and reports it (see the package doc).
func Run(sc *scenario.Scenario, policy string, o Options) (Result, error) {
	o.defaults()
	r, err := newRunner(sc, policy, o)
	if err != nil {
		return Result{}, err
	}
	return r.run()
}

// rank is one rank of a pod.
type rank struct {
	id     string // pod/r
	pod    scenario.Pod
	r      int
	peer   string // host:port
	source bool
	cons   int // index among the consumers; -1: not one
}

func (rk *rank) domain() string { return rk.pod.Domain }

type runner struct {
	sc       *scenario.Scenario
	policy   string
	o        Options
	timers   loads.Timers
	timerSet string
	peak     int
	orphans  int
	net      *Net
	zero     time.Time
	seed     uint64
	ranks    []*rank
	byID     map[string]*rank
	srcs     []*rank
	cons     []*rank
	eng      *workload.Engine
	log      *slog.Logger
}

func newRunner(sc *scenario.Scenario, policy string, o Options) (*runner, error) {
	r := &runner{sc: sc, policy: policy, o: o, byID: map[string]*rank{}, log: o.Log}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	seed := sc.Seed
	if o.Seed != 0 {
		seed = o.Seed
	}
	r.seed = uint64(seed)
	var err error
	if r.timers, r.timerSet, err = resolveTimers(policy, o); err != nil {
		return nil, err
	}
	n := NewNet(t0)
	n.VLLMTransport = r.timerSet == TimersVLLM
	n.UserTimeout = r.timers.HeartbeatTimeout // the node's TCP_USER_TIMEOUT on data connections
	n.Tick, n.IdleTick, n.Latency, n.Bandwidth = o.Tick, o.IdleTick, o.Latency, o.Bandwidth
	n.Workers = o.Workers
	n.CheckTimers = o.checkTimers
	n.TickEvery, n.CheckSkips = o.tickEvery, o.checkSkips
	n.WireBlockBytes = sc.Workload.BlockBytes
	n.OnResults = r.onResults
	r.net = n
	isSrc, isCons := map[string]bool{}, map[string]bool{}
	for _, p := range sc.Workload.Sources {
		isSrc[p] = true
	}
	for _, p := range sc.Workload.Consumers {
		isCons[p] = true
	}
	for _, p := range sc.Pods {
		for i := range p.Ranks {
			rk := &rank{id: scenario.RankID(p.Name, i), pod: p, r: i, peer: p.PeerID(i), source: isSrc[p.Name], cons: -1}
			if o.DropDomains {
				rk.pod.Domain = ""
			}
			slots := o.SourceSlots
			if isCons[p.Name] {
				slots = max(slots, o.Slots)
			}
			nd, err := n.NewNode(rk.peer, NodeOpts{
				Policy: policy, Timers: &r.timers, Domain: rk.domain(), BlockBytes: o.StoreBlock,
				Slots: slots, HashSeed: "sim", Log: r.log.With("node", rk.peer),
			})
			if err != nil {
				return nil, err
			}
			nd.Rank = rk.id
			if isCons[p.Name] {
				rk.cons = len(r.cons)
				r.cons = append(r.cons, rk)
			}
			if rk.source {
				r.srcs = append(r.srcs, rk)
			}
			r.ranks = append(r.ranks, rk)
			r.byID[rk.id] = rk
		}
	}
	if len(r.srcs) == 0 || len(r.cons) == 0 {
		return nil, fmt.Errorf("sim: scenario %s has no source or no consumer rank", sc.Name)
	}
	cfg := workload.Config{Workload: sc.Workload, Seed: r.seed, PrefillDelay: o.PrefillDelay}
	for _, c := range r.cons {
		cfg.Consumers = append(cfg.Consumers, c.id)
	}
	for _, s := range r.srcs {
		cfg.Sources = append(cfg.Sources, s.target())
	}
	eng, err := workload.New(cfg, (*fleet)(r))
	if err != nil {
		return nil, fmt.Errorf("sim: scenario %s: %w", sc.Name, err)
	}
	r.eng = eng
	return r, nil
}

// node is the current node of a rank (a restart replaces it).
func (r *runner) node(rk *rank) *Node { return r.net.nodes[rk.peer] }

func (r *runner) run() (Result, error) {
	n := r.net
	if !r.o.NoWarmup {
		r.warm()
	}
	r.zero = n.Now
	for _, f := range r.sc.Faults {
		f := f
		n.At(r.zero.Add(f.At), func() { r.fault(f) })
	}
	if r.o.leakAt > 0 {
		n.At(r.zero.Add(r.o.leakAt), r.dropRelease)
	}
	end := r.zero.Add(r.sc.Duration)
	for n.Now.Before(end) {
		n.advance(min(r.o.Tick, end.Sub(n.Now)))
		r.eng.Step(r.now()) // every engine at the tick grid
		r.checkSlots()
	}
	out := r.finish()
	out.Peak, out.Orphans, out.TimerSet, out.QueuedAcks = r.peak, r.orphans, r.timerSet, n.queuedAcks
	out.Report = report.Compute(r.sc, r.policy, out.Requests, out.Leaked)
	out.Report.PeakSlots, out.Report.OrphanSlots = r.peak, r.orphans
	out.Report.Timers, out.Report.DomainsDropped = r.timerSet, r.o.DropDomains
	return out, nil
}

// warm opens a session from every consumer to every source before time 0,
// as a fleet that has been running has them (the demo does the same).
func (r *runner) warm() {
	var ids []func()
	for _, c := range r.cons {
		cn := r.node(c)
		for _, s := range r.srcs {
			id := "warm-" + c.id + "-" + s.id
			if err := cn.T.NewRequest(r.net.Now, id, workload.Params(s.target(), id, true)); err == nil {
				ids = append(ids, func() { cn.T.RequestFinished(r.net.Now, id) })
			}
		}
		r.net.Flush(cn)
	}
	r.net.advance(r.o.Warmup / 2)
	for _, f := range ids {
		f()
	}
	r.net.flushAll()
	r.net.advance(r.o.Warmup - r.o.Warmup/2)
}

// target is the rank as the engines' request target.
func (rk *rank) target() workload.Source {
	return workload.Source{ID: rk.id, Host: rk.pod.Host, Port: rk.pod.BasePort + rk.r, Domain: rk.domain()}
}

func (r *runner) now() time.Duration { return r.net.Now.Sub(r.zero) }

// fault applies one timeline entry to every rank it targets.
func (r *runner) fault(f scenario.Fault) {
	for _, id := range r.sc.Ranks(f.Target) {
		rk := r.byID[id]
		if rk == nil {
			continue
		}
		nd := r.node(rk)
		if nd == nil {
			continue
		}
		r.log.Info("fault", "kind", string(f.Kind), "rank", id, "at", f.At)
		switch f.Kind {
		case scenario.Crash:
			r.net.crash(nd)
		case scenario.CloseControl:
			r.net.closeControl(nd)
		case scenario.Blackhole:
			nd.Silent = true
		case scenario.BlackholeData:
			nd.DataBlackhole = true
		case scenario.Stall:
			nd.stalled = true
		case scenario.Slow:
			nd.SlowBps = f.BytesPerSec
		case scenario.Delay:
			nd.ExtraDelay = f.Latency
		case scenario.GoodbyeIdle:
			r.net.goodbyeIdle(nd)
		case scenario.RefuseHandshake:
			nd.RefuseHandshake = true
		case scenario.Restart:
			r.mustNode(r.net.restart(nd))
		case scenario.Heal:
			r.mustNode(r.net.heal(nd))
		}
	}
}

func (r *runner) mustNode(nd *Node, err error) {
	if err != nil {
		panic(fmt.Sprintf("sim: rebuilding a node: %v", err)) // same options that built it once
	}
}

// content is the deterministic bytes of a block: what the source writes
// and what the consumer must find after a load.
func content(dst []byte, k wire.Key) []byte {
	for i := range dst {
		dst[i] = k[i%wire.KeySize] ^ byte(i*7)
	}
	return dst
}
