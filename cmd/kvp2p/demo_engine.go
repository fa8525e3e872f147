package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/kvp2p/kvp2p"
	"github.com/kvp2p/kvp2p/internal/scenario"
)

// The engines of a demo run mirror internal/sim's (run.go, engine.go):
// one per consumer rank (Poisson arrivals, lookups, loads, byte-for-byte
// checks) and the prefill side of every source rank (PD stores), driven
// by one loop that steps every demoStep of wall time and applies the
// scenario's faults when they are due. The arrival times, sources and
// modes come from the same random streams as the simulator's, so both
// runs make the same requests.

const (
	demoStep         = 5 * time.Millisecond
	demoPrefillDelay = 20 * time.Millisecond // as the simulator's default
	demoWarmup       = time.Second
)

type demoConsumer struct {
	idx     int
	rank    *demoRank
	rng     *rand.Rand
	next    time.Duration
	seq     int
	pending []*demoReq
	jobs    map[uint64]*demoReq
}

func (c *demoConsumer) gap(rate float64) time.Duration {
	return time.Duration(c.rng.ExpFloat64() / rate * float64(time.Second))
}

type demoReq struct {
	rec     scenario.Request
	src     *demoRank
	keys    []kvp2p.Key
	pd      bool
	loading bool
	done    bool
	job     uint64
}

type demoProd struct {
	due  time.Duration
	rk   *demoRank
	node *kvp2p.Node // the incarnation that took the request
	id   string
	keys []kvp2p.Key
}

// demoRun is one (scenario, policy) run on real sockets.
type demoRun struct {
	f      *demoFleet
	sc     *scenario.Scenario
	zero   time.Time
	reqs   []*demoReq
	prod   []demoProd
	faults []scenario.Fault
	want   []byte // scratch: expected block bytes

	nreq, nres atomic.Int64 // progress
}

// runDemoScenario runs sc under policy on real sockets and reports it.
// blockBytes overrides the workload's block size when positive.
func runDemoScenario(ctx context.Context, sc *scenario.Scenario, policy string, blockBytes int, progress func(*demoRun)) (scenario.Run, error) {
	if blockBytes <= 0 {
		blockBytes = sc.Workload.BlockBytes
	}
	f, err := newDemoFleet(sc, policy, blockBytes, discardLog())
	if err != nil {
		return scenario.Run{}, err
	}
	r := &demoRun{f: f, sc: sc, faults: slices.Clone(sc.Faults), want: make([]byte, blockBytes)}
	slices.SortStableFunc(r.faults, func(a, b scenario.Fault) int { return int(a.At - b.At) })
	if progress != nil {
		progress(r)
	}
	if err := r.warm(ctx); err != nil {
		f.closeAll()
		return scenario.Run{}, err
	}
	r.zero = time.Now()
	if err := r.loop(ctx); err != nil {
		f.closeAll()
		return scenario.Run{}, err
	}
	leaked, err := r.finish(ctx)
	if err != nil {
		return scenario.Run{}, err
	}
	recs := make([]scenario.Request, len(r.reqs))
	for i, q := range r.reqs {
		recs[i] = q.rec
	}
	rep := scenario.Compute(sc, policy, recs, leaked)
	return scenario.Run{Policy: policy, Requests: recs, Report: rep}, nil
}

func (r *demoRun) now() time.Duration { return time.Since(r.zero) }

// warm opens a session from every consumer to every source before time 0,
// as a fleet that has been running has them (the simulator does the same).
func (r *demoRun) warm(ctx context.Context) error {
	deadline := time.Now().Add(5 * time.Second)
	for _, c := range r.f.cons {
		for _, s := range r.f.srcs {
			// A fresh request per try: per-peer and host-group answer MISS
			// while the handshake is pending, and a request that missed
			// stays missed.
			for n := 0; time.Now().Before(deadline); n++ {
				id := fmt.Sprintf("warm-%s-%s-%d", c.rank.id, s.id, n)
				if err := c.rank.m.NewRequest(id, r.params(s, id, true)); err != nil {
					return fmt.Errorf("warming %s to %s: %w", c.rank.id, s.id, err)
				}
				v := c.rank.m.Lookup(id, kvp2p.Key{})
				c.rank.m.RequestFinished(id)
				if v == kvp2p.Hit {
					break
				}
				if err := sleepCtx(ctx, demoStep); err != nil {
					return err
				}
			}
		}
	}
	return sleepCtx(ctx, demoWarmup/2)
}

func (r *demoRun) params(s *demoRank, kv string, pd bool) kvp2p.TransferParams {
	rm := &kvp2p.Remote{KVRequestID: kv, RemoteHost: s.pod.Host, RemotePort: s.pod.BasePort + s.r, RemoteDomain: s.pod.Domain}
	if pd {
		return kvp2p.TransferParams{RemotePrefiller: rm}
	}
	return kvp2p.TransferParams{RemoteKVSource: rm}
}

func (r *demoRun) loop(ctx context.Context) error {
	next := time.Now()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		now := r.now()
		if now >= r.sc.Duration {
			r.step() // the simulator's last step is at the end too
			return nil
		}
		for len(r.faults) > 0 && r.faults[0].At <= now {
			if err := r.fault(r.faults[0]); err != nil {
				return err
			}
			r.faults = r.faults[1:]
		}
		r.step()
		next = next.Add(demoStep)
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		} else {
			next = time.Now() // running late: do not try to catch up in a burst
		}
	}
}

// fault applies one timeline entry to every rank it targets.
func (r *demoRun) fault(ft scenario.Fault) error {
	for _, id := range r.sc.Ranks(ft.Target) {
		rk := r.f.byID[id]
		if rk == nil {
			continue
		}
		fab := r.f.fab
		switch ft.Kind {
		case scenario.Crash:
			fab.heal(rk.label) // a crashed process holds nothing back
			rk.stalled = false
			r.f.crash(rk)
		case scenario.CloseControl:
			if rk.node != nil {
				fab.reset(rk.label)
			}
		case scenario.Blackhole:
			fab.set(rk.label, func(f *rankFault) { f.black = true })
		case scenario.BlackholeData:
			fab.set(rk.label, func(f *rankFault) { f.dataBlack = true })
		case scenario.Stall:
			rk.stalled = true
			fab.set(rk.label, func(f *rankFault) { f.stall = true })
		case scenario.Slow:
			fab.set(rk.label, func(f *rankFault) { f.slowBps = ft.BytesPerSec })
		case scenario.Delay:
			fab.set(rk.label, func(f *rankFault) { f.delay = ft.Latency })
		case scenario.GoodbyeIdle:
			if rk.node != nil {
				fab.goodbye(rk.label)
			}
		case scenario.RefuseHandshake:
			fab.set(rk.label, func(f *rankFault) { f.refuse = true })
		case scenario.Restart:
			fab.heal(rk.label)
			rk.stalled = false
			if err := r.f.restart(rk); err != nil {
				return err
			}
		case scenario.Heal:
			fab.heal(rk.label)
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
func (r *demoRun) step() {
	r.prefill()
	for _, c := range r.f.cons {
		rk := c.rank
		if rk.node == nil || rk.stalled {
			continue
		}
		r.arrivals(c)
		r.results(c)
		if r.lookups(c) {
			rk.m.EndStep()
		}
	}
}

// prefill: a PD prefill finishing on a source registers the request as
// remote_decoder, writes its blocks, SubmitStores them and finishes it.
func (r *demoRun) prefill() {
	now := r.now()
	kept := r.prod[:0]
	for _, it := range r.prod {
		if it.due > now || it.rk.stalled {
			kept = append(kept, it)
			continue
		}
		if it.rk.node != it.node {
			continue // the process that was prefilling is gone
		}
		m := it.rk.m
		if m.NewRequest(it.id, kvp2p.TransferParams{RemoteDecoder: &kvp2p.Remote{KVRequestID: it.id}}) == nil {
			for _, k := range it.keys {
				_ = m.PutBlock(k, r.content(k)) // full of pins: the fetch fails, as it would
			}
			_, _ = m.SubmitStore(it.id, it.keys)
			m.RequestFinished(it.id)
			it.rk.stored = true
		}
	}
	clear(r.prod[len(kept):])
	r.prod = kept
	for _, rk := range r.f.srcs {
		if rk.stored && rk.m != nil {
			rk.m.PollFinished() // store results: nothing to act on
			rk.stored = false
		}
	}
}

func (r *demoRun) arrivals(c *demoConsumer) {
	w := r.sc.Workload
	now := r.now()
	m := c.rank.m
	for c.next <= now && c.next < w.Stop {
		at := c.next
		c.next += c.gap(w.Rate)
		c.seq++
		src := r.f.srcs[c.rng.IntN(len(r.f.srcs))]
		pd := w.Mode == scenario.ModePD || (w.Mode == scenario.ModeMixed && c.rng.IntN(2) == 0)
		id := fmt.Sprintf("%s#%d", c.rank.id, c.seq)
		q := &demoReq{src: src, pd: pd, rec: scenario.Request{
			ID: id, Consumer: c.rank.id, Source: src.id, Mode: scenario.ModeSymmetric, Arrived: at,
		}}
		if pd {
			q.rec.Mode = scenario.ModePD
		}
		q.keys = make([]kvp2p.Key, w.Blocks)
		for i := range q.keys {
			q.keys[i] = r.key(c.idx, c.seq, i)
		}
		r.reqs = append(r.reqs, q)
		r.nreq.Add(1)
		switch {
		case src.node == nil:
		case pd:
			r.prod = append(r.prod, demoProd{due: at + demoPrefillDelay, rk: src, node: src.node, id: id, keys: q.keys})
		default:
			for _, k := range q.keys {
				_ = src.m.PutBlock(k, r.content(k)) // the source computed this prefix earlier
			}
		}
		if err := m.NewRequest(id, r.params(src, id, pd)); err != nil {
			r.resolve(c, q, scenario.Fallback)
			continue
		}
		c.pending = append(c.pending, q)
	}
}

// results acts on finished loads: a load reported OK is read back and
// checked byte for byte.
func (r *demoRun) results(c *demoConsumer) {
	m := c.rank.m
	for _, res := range m.PollFinished() {
		q := c.jobs[res.Job]
		if res.Kind != kvp2p.JobLoad || q == nil || !q.loading || q.done {
			continue
		}
		delete(c.jobs, res.Job)
		if !res.OK {
			r.resolve(c, q, scenario.Fallback)
			continue
		}
		for _, k := range q.keys {
			got, ok := m.ReadBlock(k)
			if !ok || !bytes.Equal(got, r.content(k)) {
				q.rec.Corrupt = true // reported loaded, yet missing or wrong
				break
			}
		}
		if q.rec.Corrupt {
			r.resolve(c, q, scenario.Fallback)
			continue
		}
		q.rec.Bytes = uint64(len(q.keys)) * uint64(r.f.blockBytes)
		r.resolve(c, q, scenario.Hit)
	}
}

// lookups runs one step's lookups; it reports whether any registered a
// key to flush (symmetric).
func (r *demoRun) lookups(c *demoConsumer) (registered bool) {
	m := c.rank.m
	for _, q := range c.pending {
		if q.loading || q.done {
			continue
		}
		v := kvp2p.Hit
		if q.pd {
			v = m.Lookup(q.rec.ID, q.keys[0])
		} else {
			registered = true
			for _, k := range q.keys {
				switch m.Lookup(q.rec.ID, k) {
				case kvp2p.Miss:
					v = kvp2p.Miss
				case kvp2p.Retry:
					if v == kvp2p.Hit {
						v = kvp2p.Retry
					}
				}
			}
		}
		switch v {
		case kvp2p.Hit:
			job, err := m.SubmitLoad(q.rec.ID, q.keys)
			if err != nil {
				r.resolve(c, q, scenario.Fallback)
				continue
			}
			q.loading, q.job = true, job
			c.jobs[job] = q
		case kvp2p.Miss:
			r.resolve(c, q, scenario.Fallback)
		}
	}
	c.pending = slices.DeleteFunc(c.pending, func(q *demoReq) bool { return q.done })
	return registered
}

func (r *demoRun) resolve(c *demoConsumer, q *demoReq, o scenario.Outcome) {
	q.done = true
	q.rec.Outcome = o
	q.rec.Resolved = r.now()
	r.nres.Add(1)
	if q.job != 0 {
		delete(c.jobs, q.job)
	}
	if c.rank.m != nil {
		c.rank.m.RequestFinished(q.rec.ID)
	}
}

// finish ends the run: what is unresolved is stuck; then every fault is
// healed, every request finished, every node shut down gracefully, and
// the slots still held are counted.
func (r *demoRun) finish(ctx context.Context) (int, error) {
	for _, rk := range r.f.ranks {
		r.f.fab.heal(rk.label)
		rk.stalled = false
	}
	for _, c := range r.f.cons {
		for _, q := range c.pending {
			q.done = true // Outcome stays Stuck
			if c.rank.m != nil {
				c.rank.m.RequestFinished(q.rec.ID)
			}
		}
		c.pending = nil
	}
	r.prod = nil
	return r.f.shutdown(ctx)
}

// key is block i of request seq of consumer c: distinct for every block of
// a run, the same for every run of (scenario, seed).
func (r *demoRun) key(c, seq, i int) kvp2p.Key {
	var k kvp2p.Key
	a := splitmix64(uint64(r.sc.Seed) ^ uint64(c)<<48 ^ uint64(seq)<<16 ^ uint64(i))
	b := splitmix64(a ^ 0x9e3779b97f4a7c15)
	binary.LittleEndian.PutUint64(k[:8], a)
	binary.LittleEndian.PutUint64(k[8:], b)
	return k
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// content is the block's bytes, what the source writes and the consumer
// must find: a pattern of the key, with the offset stamped every 4 KiB so
// that a misplaced chunk shows. Built with copies, at memmove speed. The
// returned slice is scratch, valid until the next call.
func (r *demoRun) content(k kvp2p.Key) []byte {
	b := r.want
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

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
