package demo

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/kvp2p/kvp2p/internal/cpuwait"
	"github.com/kvp2p/kvp2p/internal/drive"
	"github.com/kvp2p/kvp2p/internal/faultnet"
	"github.com/kvp2p/kvp2p/internal/node"
	"github.com/kvp2p/kvp2p/internal/report"
	"github.com/kvp2p/kvp2p/internal/scenario"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/workload"
)

// The engines of a demo run are internal/workload's, as in internal/sim:
// one per consumer rank (Poisson arrivals, lookups, loads, byte-for-byte
// checks) and the prefill side of every source rank (PD stores), driven
// by one loop that steps every demoStep of wall time and applies the
// scenario's faults when they are due. The arrival times, sources and
// modes come from the same random streams as the simulator's, so both
// runs make the same requests. demoNode adapts a rank's node.Manager.

const (
	demoStep         = 5 * time.Millisecond
	demoPrefillDelay = 20 * time.Millisecond // as the simulator's default
	demoWarmup       = time.Second
)

// Run is one (scenario, policy) run on real sockets.
type Run struct {
	f      *demoFleet
	sc     *scenario.Scenario
	zero   time.Time
	eng    *workload.Engine
	faults []scenario.Fault
	want   []byte // scratch: expected block bytes
	got    []byte // scratch: a block read back
	stats  demoStats
	slots  slotCheck                   // peak and orphaned slots, at every step (slots.go)
	evict  map[*demoRank]*evictWitness // consumers' eviction counts (evict.go)

	nreq, nres atomic.Int64 // progress
}

// RunScenario runs sc under policy on real sockets and reports it.
// blockBytes overrides the workload's block size when positive.
func RunScenario(ctx context.Context, sc *scenario.Scenario, policy string, blockBytes int, useTLS bool, progress func(*Run)) (Result, error) {
	if blockBytes <= 0 {
		blockBytes = sc.Workload.BlockBytes
	}
	var tc *demoTLS
	if useTLS {
		var err error
		if tc, err = newDemoTLS(); err != nil {
			return Result{}, err
		}
		defer tc.close()
	}
	// A previous run's fleet is garbage now, but under GOGC its gigabytes
	// of arenas are collected only once the heap has grown by as much
	// again: collect it first, so that this fleet's arenas reuse its
	// memory instead of adding to it (issue 14).
	runtime.GC()
	f, err := newDemoFleet(sc, policy, blockBytes, discardLog(), tc)
	if err != nil {
		return Result{}, err
	}
	r := &Run{f: f, sc: sc, faults: slices.Clone(sc.Faults), want: make([]byte, blockBytes)}
	cfg := workload.Config{Workload: sc.Workload, Seed: uint64(sc.Seed), PrefillDelay: demoPrefillDelay, BlockBytes: blockBytes}
	for _, rk := range f.cons {
		cfg.Consumers = append(cfg.Consumers, rk.id)
	}
	for _, rk := range f.srcs {
		cfg.Sources = append(cfg.Sources, rk.target())
	}
	if r.eng, err = workload.New(cfg, r); err != nil {
		f.closeAll()
		return Result{}, err
	}
	slices.SortStableFunc(r.faults, func(a, b scenario.Fault) int { return int(a.At - b.At) })
	if progress != nil {
		progress(r)
	}
	if err := r.warm(ctx); err != nil {
		f.closeAll()
		return Result{}, err
	}
	r.zero = time.Now()
	cw := cpuwait.Start()
	sm := startSched()
	if err := r.loop(ctx); err != nil {
		f.closeAll()
		return Result{}, err
	}
	r.stats.cpuWait, r.stats.cpuWaitOK = cw.Share()
	r.stats.sched99, r.stats.schedMax, r.stats.schedOK = sm.quantiles()
	for _, rk := range f.ranks {
		if rk.node != nil {
			l := rk.node.LoopLateness()
			r.stats.nodeLateMax = max(r.stats.nodeLateMax, l.Max)
		}
	}
	leaked, err := r.finish(ctx)
	r.evict = nil // its witnesses hold the consumers' last nodes: a caller may keep r
	if err != nil {
		return Result{}, err
	}
	recs := r.eng.Requests()
	rep := report.Compute(sc, policy, recs, leaked)
	rep.PeakSlots, rep.OrphanSlots = r.slots.peak, r.slots.orphans
	return Result{Run: report.Run{Policy: policy, Requests: recs, Report: rep}, stats: r.stats}, nil
}

func (r *Run) now() time.Duration { return time.Since(r.zero) }

// warm opens a session from every consumer to every source before time 0,
// as a fleet that has been running has them (the simulator does the same).
func (r *Run) warm(ctx context.Context) error {
	deadline := time.Now().Add(5 * time.Second)
	for _, c := range r.f.cons {
		for _, s := range r.f.srcs {
			if _, err := drive.Warm(ctx, r.nodeOf(c), s.target(), "warm-"+c.id+"-"+s.id, deadline, demoStep); err != nil {
				if ctx.Err() != nil {
					return err
				}
				return fmt.Errorf("warming %s to %s: %w", c.id, s.id, err)
			}
		}
	}
	return drive.Sleep(ctx, demoWarmup/2)
}

// target is the rank as the engines' request target.
func (rk *demoRank) target() workload.Source {
	return workload.Source{ID: rk.id, Host: rk.pod.Host, Port: rk.pod.BasePort + rk.r, Domain: rk.pod.Domain}
}

func (r *Run) loop(ctx context.Context) error {
	return drive.Steps(ctx, r.zero, r.sc.Duration, demoStep, func(now time.Duration, due time.Time) error {
		for len(r.faults) > 0 && r.faults[0].At <= now {
			t0 := time.Now()
			if err := r.fault(r.faults[0]); err != nil {
				return err
			}
			r.stats.faultTook(r.faults[0], time.Since(t0))
			r.faults = r.faults[1:]
		}
		r.stats.late = append(r.stats.late, max(time.Since(due), 0))
		began := time.Now()
		r.step()
		r.stats.took = append(r.stats.took, time.Since(began))
		return nil
	}, func(time.Duration) { r.step() }) // the simulator's last step is at the end too
}

// fault applies one timeline entry to every rank it targets.
func (r *Run) fault(ft scenario.Fault) error {
	for _, id := range r.sc.Ranks(ft.Target) {
		rk := r.f.byID[id]
		if rk == nil {
			continue
		}
		inj := r.f.inj
		switch ft.Kind {
		case scenario.Crash:
			inj.Heal(rk.label) // a crashed process holds nothing back
			rk.stalled = false
			r.f.crash(rk)
		case scenario.CloseControl:
			if rk.node != nil {
				inj.Reset(rk.label)
			}
		case scenario.Blackhole:
			inj.Set(rk.label, func(f *faultnet.RankFault) { f.Black = true })
		case scenario.BlackholeData:
			inj.Set(rk.label, func(f *faultnet.RankFault) { f.DataBlack = true })
		case scenario.Stall:
			rk.stalled = true
			inj.Set(rk.label, func(f *faultnet.RankFault) { f.Stall = true })
		case scenario.Slow:
			inj.Set(rk.label, func(f *faultnet.RankFault) { f.SlowBps = ft.BytesPerSec })
		case scenario.Delay:
			inj.Set(rk.label, func(f *faultnet.RankFault) { f.Delay = ft.Latency })
		case scenario.GoodbyeIdle:
			if rk.node != nil {
				inj.Goodbye(rk.label)
			}
		case scenario.RefuseHandshake:
			inj.Set(rk.label, func(f *faultnet.RankFault) { f.Refuse = true })
		case scenario.Restart:
			inj.Heal(rk.label)
			rk.stalled = false
			if err := r.f.restart(rk); err != nil {
				return err
			}
		case scenario.Heal:
			inj.Heal(rk.label)
			rk.stalled = false
			if rk.node == nil {
				if err := r.f.restart(rk); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// step is one engine step of every engine.
func (r *Run) step() {
	r.eng.Step(r.now())
	r.slots.check(r.f.ranks)
	n, res := r.eng.Counts()
	r.nreq.Store(int64(n))
	r.nres.Store(int64(res))
}

// Consumer and Source make the run the engines' workload.Fleet.
func (r *Run) Consumer(i int) workload.Node { return r.nodeOf(r.f.cons[i]) }
func (r *Run) Source(j int) workload.Node   { return r.nodeOf(r.f.srcs[j]) }

func (r *Run) nodeOf(rk *demoRank) workload.Node {
	if rk.node == nil {
		return nil
	}
	return demoNode{r: r, rk: rk, node: rk.node, m: rk.m}
}

// demoNode is one incarnation of a rank as a workload.Node: its calls go
// to the node's Manager, which stamps them with wall time.
type demoNode struct {
	r    *Run
	rk   *demoRank
	node *node.Node // the incarnation
	m    *node.Manager
}

func (d demoNode) Status() workload.Status {
	switch {
	case d.rk.stalled:
		return workload.Paused
	case d.rk.node != d.node:
		return workload.Gone
	}
	return workload.Up
}

func (d demoNode) NewRequest(id string, p node.TransferParams) error { return d.m.NewRequest(id, p) }
func (d demoNode) Lookup(id string, k node.Key) node.Verdict         { return d.m.Lookup(id, k) }
func (d demoNode) EndStep()                                          { d.m.EndStep() }
func (d demoNode) RequestFinished(id string)                         { d.m.RequestFinished(id) }

func (d demoNode) SubmitLoad(id string, keys []node.Key) (uint64, error) {
	return d.m.SubmitLoad(id, keys)
}

func (d demoNode) SubmitStore(id string, keys []node.Key) {
	_, _ = d.m.SubmitStore(id, keys)
	d.rk.stored = true
}

func (d demoNode) PutBlocks(keys []node.Key) {
	for _, k := range keys {
		_ = d.m.PutBlock(k, d.r.content(k))
	}
}

// Verify reads a loaded request's blocks back and checks them byte for
// byte. It fails the load for a block with wrong bytes, or one no longer
// in the store although the store evicted nothing since (evict.go); one
// that was evicted after the load completed is counted as missing.
func (d demoNode) Verify(keys []node.Key) bool {
	ok := true
	for _, k := range keys {
		c := d.check(k)
		d.r.stats.check.add(c)
		ok = ok && c != blockWrong && c != blockVanished
	}
	return ok
}

// check reads one block back.
func (d demoNode) check(k node.Key) blockCheck {
	got, ok := d.m.ReadBlockInto(d.r.got[:0], k)
	d.r.got = got[:0]
	switch {
	case !ok:
		return d.r.missing(d)
	case !bytes.Equal(got, d.r.content(k)):
		return blockWrong
	}
	return blockIntact
}

// Flush: the Manager performs every call at once; only a source that
// stored has results to take, and nothing to act on.
func (d demoNode) Flush() {
	if d.rk.stored && d.rk.m != nil {
		d.rk.m.PollFinished()
		d.rk.stored = false
	}
}

func (d demoNode) Poll() []node.JobResult {
	d.r.beforePoll(d)
	rs := d.m.PollFinished()
	for _, r := range rs {
		if r.Kind != node.JobLoad || r.OK {
			continue
		}
		if r.Reason == session.ReasonStartBudget {
			d.r.stats.overBudget++
		}
		if d.r.stats.failed == nil {
			d.r.stats.failed = map[string]int{}
		}
		d.r.stats.failed[r.Reason]++
	}
	return rs
}
func (d demoNode) Busy(bool) {}

// finish ends the run: what is unresolved is stuck; then every fault is
// healed, every request finished, every node shut down gracefully, and
// the slots still held are counted.
func (r *Run) finish(ctx context.Context) (int, error) {
	for _, rk := range r.f.ranks {
		r.f.inj.Heal(rk.label)
		rk.stalled = false
	}
	r.eng.EndRun()
	return r.f.shutdown(ctx)
}

// content is the block's bytes, what the source writes and the consumer
// must find (blockContent). The returned slice is scratch, valid until the
// next call.
func (r *Run) content(k node.Key) []byte { return blockContent(r.want, k) }

// blockContent fills b with k's block: a pattern of the key, with the
// offset stamped every 4 KiB so that a misplaced chunk shows. Built with
// copies, at memmove speed.
func blockContent(b []byte, k node.Key) []byte {
	n := min(len(b), 64)
	for i := range n {
		b[i] = k[i%len(k)] ^ byte(i*7)
	}
	for filled := n; filled < len(b); filled *= 2 {
		copy(b[filled:], b[:filled])
	}
	for off := 0; off+8 <= len(b); off += 4096 {
		binary.LittleEndian.PutUint32(b[off:], uint32(off))
		b[off+4] ^= k[0]
	}
	return b
}

// FirstConsumer is the fleet's first consumer node (nil while crashed),
// whose status page the demo serves.
func (r *Run) FirstConsumer() *node.Node { return r.f.cons[0].node }

// Progress is how many requests the run has made and resolved so far.
func (r *Run) Progress() (resolved, requests int64) { return r.nres.Load(), r.nreq.Load() }
