package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvp2p/kvp2p/internal/faultnet"
	"github.com/kvp2p/kvp2p/internal/node"
	"github.com/kvp2p/kvp2p/internal/scenario"
)

// A fleet is one node.Node per rank of every pod of a scenario, on
// 127.0.0.1 with real TCP, under one policy. Peer ids are the scenario's
// host:port labels; Config.Dial maps them to the real listen addresses.

type demoRank struct {
	id     string // pod/r
	pod    scenario.Pod
	r      int
	label  string // advertised host:port
	addr   string // 127.0.0.1:port it really listens on
	source bool
	slots  int
	touch  int // slots to prefault before its first node serves (prefault.go)

	node    *node.Node // nil while crashed
	m       *node.Manager
	serve   chan error
	inc     uint64
	stalled bool
	stored  bool // has store results to poll
}

type demoFleet struct {
	sc         *scenario.Scenario
	policy     string
	blockBytes int
	inj        *faultnet.Injector
	ranks      []*demoRank
	byID       map[string]*demoRank
	byLabel    map[string]*demoRank
	srcs       []*demoRank
	cons       []*demoRank
	log        *slog.Logger
	tls        *demoTLS // nil: plain TCP
}

// Slots per node: the simulator's (16384 for consumers, 4096 for the
// others), capped so that a fleet of large blocks fits in memory.
const (
	consumerArenaCap = 2 << 30
	sourceArenaCap   = 512 << 20
)

func newDemoFleet(sc *scenario.Scenario, policy string, blockBytes int, log *slog.Logger, tc *demoTLS) (*demoFleet, error) {
	f := &demoFleet{sc: sc, policy: policy, blockBytes: blockBytes, inj: faultnet.NewInjector(),
		byID: map[string]*demoRank{}, byLabel: map[string]*demoRank{}, log: log, tls: tc}
	isSrc, isCons := map[string]bool{}, map[string]bool{}
	for _, p := range sc.Workload.Sources {
		isSrc[p] = true
	}
	for _, p := range sc.Workload.Consumers {
		isCons[p] = true
	}
	incBase := rand.Uint64() &^ 0xffff
	for _, p := range sc.Pods {
		for i := range p.Ranks {
			rk := &demoRank{id: scenario.RankID(p.Name, i), pod: p, r: i, label: p.PeerID(i), source: isSrc[p.Name],
				inc: incBase + uint64(len(f.ranks))<<8 + 1}
			rk.slots = min(4096, max(64, sourceArenaCap/blockBytes))
			if isCons[p.Name] {
				rk.slots = min(16384, max(256, consumerArenaCap/blockBytes))
				f.cons = append(f.cons, rk)
			}
			if rk.source {
				f.srcs = append(f.srcs, rk)
			}
			f.ranks = append(f.ranks, rk)
			f.byID[rk.id] = rk
			f.byLabel[rk.label] = rk
		}
	}
	if len(f.srcs) == 0 || len(f.cons) == 0 {
		return nil, fmt.Errorf("demo: scenario %s has no source or no consumer rank", sc.Name)
	}
	f.planPrefault()
	for _, rk := range f.ranks {
		ln, err := listenFree()
		if err != nil {
			f.closeAll()
			return nil, err
		}
		rk.addr = ln.Addr().String()
		if err := f.start(rk, ln); err != nil {
			ln.Close()
			f.closeAll()
			return nil, err
		}
	}
	return f, nil
}

// wrapAccepted is the rank's fault injection on a TLS fleet (nil on plain
// TCP, where the listener wraps connections before the node sees them).
func (f *demoFleet) wrapAccepted(rk *demoRank) func(net.Conn) net.Conn {
	if f.tls == nil {
		return nil
	}
	return func(nc net.Conn) net.Conn { return f.inj.Wrap(nc, rk.label) }
}

func (f *demoFleet) dial(peer string) string {
	if rk := f.byLabel[peer]; rk != nil {
		return rk.addr
	}
	return peer
}

// start runs a new node for the rank on ln (nil: listen on its port again).
func (f *demoFleet) start(rk *demoRank, ln net.Listener) error {
	if ln == nil {
		var err error
		if ln, err = relisten(rk.addr); err != nil {
			return fmt.Errorf("%s: listening again on %s: %w", rk.id, rk.addr, err)
		}
	}
	tc, err := f.tls.forRank(rk)
	if err != nil {
		return err
	}
	n, err := node.New(node.Config{
		PeerID: rk.label, FailureDomain: rk.pod.Domain, Policy: f.policy,
		BlockBytes: f.blockBytes, Slots: rk.slots, HashSeed: "demo", Incarnation: rk.inc,
		Dial: f.dial, Log: f.log.With("rank", rk.id),
		// The labels' hosts (10.0.0.x) all listen on 127.0.0.1: on plain
		// TCP the source address proves nothing here. With TLS each
		// rank's certificate names its label's host.
		TrustClaimedHost: true, TLS: tc, WrapAccepted: f.wrapAccepted(rk),
	})
	if err != nil {
		return err
	}
	prefault(n, rk.touch) // before its loop runs: no lateness, no state
	rk.touch = 0          // a restarted rank's arena is fresh, as a restarted engine's
	rk.node, rk.m, rk.serve = n, n.Manager(), make(chan error, 1)
	var sl net.Listener = ln
	if f.tls == nil {
		sl = faultnet.NewListener(ln, f.inj, rk.label) // else wrapped after TLS: wrapAccepted
	}
	go func(n *node.Node, ch chan error) { ch <- n.Serve(sl) }(n, rk.serve)
	return nil
}

// crash closes the rank's node now: its connections reset, dials to its
// port are refused.
func (f *demoFleet) crash(rk *demoRank) {
	if rk.node == nil {
		return
	}
	rk.node.Close()
	<-rk.serve
	rk.node, rk.m = nil, nil
}

// restart brings a crashed (or live) rank back as a new incarnation on
// the same port.
func (f *demoFleet) restart(rk *demoRank) error {
	f.crash(rk)
	rk.inc++
	return f.start(rk, nil)
}

// closeAll closes every node at once (errors, cancellation).
func (f *demoFleet) closeAll() {
	for _, rk := range f.ranks {
		f.inj.Heal(rk.label)
	}
	for _, rk := range f.ranks {
		f.crash(rk)
	}
}

// shutdown stops every live node gracefully, all at once, and returns the
// slots they still hold (Filling or Pinned): leaked.
func (f *demoFleet) shutdown(ctx context.Context) (int, error) {
	var wg sync.WaitGroup
	var leaked atomic.Int64
	errs := make([]error, len(f.ranks))
	for i, rk := range f.ranks {
		if rk.node == nil {
			continue // crashed and never healed: the process is gone, it holds nothing
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			_ = rk.node.Shutdown(sctx)
			<-rk.serve
			st, err := rk.node.FinalStats()
			if err != nil {
				errs[i] = fmt.Errorf("%s: %v", rk.id, err)
			}
			leaked.Add(int64(st.Filling + st.Pinned))
		}()
	}
	wg.Wait()
	for _, rk := range f.ranks {
		rk.node, rk.m = nil, nil
	}
	for _, err := range errs {
		if err != nil {
			return int(leaked.Load()), err
		}
	}
	return int(leaked.Load()), nil
}

// Ports: below Linux's ephemeral range (32768-60999), so that an outgoing
// connection never takes the port of a crashed rank before it comes back.
var demoPort atomic.Int64

func listenFree() (net.Listener, error) {
	demoPort.CompareAndSwap(0, 20000+rand.Int64N(8000))
	var last error
	for range 2000 {
		p := demoPort.Add(1)
		if p >= 32000 {
			demoPort.Store(20000)
			continue
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.FormatInt(p, 10))
		if err == nil {
			return ln, nil
		}
		last = err
	}
	return nil, fmt.Errorf("demo: no free port on 127.0.0.1: %v", last)
}

// relisten listens on a port a closed node just released.
func relisten(addr string) (net.Listener, error) {
	var err error
	for range 100 {
		var ln net.Listener
		if ln, err = net.Listen("tcp", addr); err == nil {
			return ln, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil, err
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// MemEstimate is what one fleet's arenas come to hold: every block
// written stays cached until its slot is reused.
func MemEstimate(sc *scenario.Scenario, bb int) int {
	w := sc.Workload
	cons, srcs := 0, 0
	for _, p := range sc.Pods {
		if slices.Contains(w.Consumers, p.Name) {
			cons += p.Ranks
		} else if slices.Contains(w.Sources, p.Name) {
			srcs += p.Ranks
		}
	}
	total := int(w.Rate * float64(cons) * (w.Stop - w.Start).Seconds() * float64(w.Blocks) * float64(bb))
	cArena := cons * min(16384, max(256, consumerArenaCap/bb)) * bb
	sArena := srcs * min(4096, max(64, sourceArenaCap/bb)) * bb
	return min(total, cArena) + min(total, sArena)
}
