package workload

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/report"
	"github.com/kvp2p/kvp2p/internal/scenario"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// Status is the state of one incarnation of a rank's process.
type Status uint8

const (
	Up     Status = iota // running
	Paused               // stalled: takes no engine step, keeps its work for later
	Gone                 // crashed or replaced by a restart: its work is dropped
)

// Node is one incarnation of a rank's process, as the engine uses it. A
// node with its own clock stamps the calls itself. Calls never block for
// long (a Manager call is one round trip to its loop).
type Node interface {
	// Status reports whether the incarnation is up, paused or gone.
	Status() Status

	NewRequest(id string, p loads.TransferParams) error
	Lookup(id string, k wire.Key) session.Verdict
	// EndStep flushes this step's lookups to the peers (on_schedule_end).
	EndStep()
	// SubmitLoad starts a load; an error fails the request at once.
	SubmitLoad(id string, keys []wire.Key) (job uint64, err error)
	SubmitStore(id string, keys []wire.Key)
	RequestFinished(id string)

	// PutBlocks writes the blocks of keys, as the engine computed them,
	// into the node's store; a block that does not fit is left out.
	PutBlocks(keys []wire.Key)
	// Verify reports whether every block of keys is in the store with the
	// bytes PutBlocks writes.
	Verify(keys []wire.Key) bool

	// Flush is called after each batch of calls: a node that queues its
	// actions performs them now. Results it publishes may be handed to
	// Engine.Deliver before Flush returns.
	Flush()
	// Poll returns the job results finished since the last call, for a
	// driver that does not deliver them itself (nil otherwise). Step
	// calls it on each consumer before acting on the results.
	Poll() []loads.JobResult
	// Busy reports, after each engine step and at EndRun, whether the
	// consumer has requests in flight.
	Busy(bool)
}

// Fleet gives the engine the current incarnation of each rank, indexed as
// in Config; nil while a rank has no process.
type Fleet interface {
	Consumer(i int) Node
	Source(j int) Node
}

// Source is a source rank: where its consumers' requests point.
type Source struct {
	ID     string // pod/r
	Host   string
	Port   int
	Domain string
}

// Config describes a run.
type Config struct {
	Workload     scenario.Workload
	Seed         uint64
	Consumers    []string // consumer rank ids (pod/r), in order
	Sources      []Source
	PrefillDelay time.Duration // PD: arrival to SubmitStore on the source
	BlockBytes   int           // bytes a hit loads per block; 0: Workload.BlockBytes
}

// Params is the transfer parameters of request kv from src: PD (the source
// prefills it) or symmetric (the source computed the prefix earlier).
func Params(src Source, kv string, pd bool) loads.TransferParams {
	rm := &loads.Remote{KVRequestID: kv, RemoteHost: src.Host, RemotePort: src.Port, RemoteDomain: src.Domain}
	if pd {
		return loads.TransferParams{RemotePrefiller: rm}
	}
	return loads.TransferParams{RemoteKVSource: rm}
}

// Key is block i of request seq of consumer c: distinct for every block of
// a run, the same for every run of (scenario, seed).
func Key(seed uint64, c, seq, i int) wire.Key {
	var k wire.Key
	a := splitmix(seed ^ uint64(c)<<48 ^ uint64(seq)<<16 ^ uint64(i))
	b := splitmix(a ^ 0x9e3779b97f4a7c15)
	for j := range 8 {
		k[j] = byte(a >> (8 * j))
		k[8+j] = byte(b >> (8 * j))
	}
	return k
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Engine runs the request lifecycle of every consumer and the PD prefills
// of every source. See the package doc for the caller's duties.
type Engine struct {
	cfg      Config
	fleet    Fleet
	cons     []*consumer
	reqs     []*req
	prod     []prodItem
	resolved int
}

type consumer struct {
	idx     int
	id      string
	rng     *rand.Rand
	next    time.Duration // next arrival, since time 0
	seq     int
	pending []*req // unresolved, in arrival order
	jobs    map[uint64]*req
	done    []*req // load results to act on at the next step
}

func (c *consumer) gap(rate float64) time.Duration {
	return time.Duration(c.rng.ExpFloat64() / rate * float64(time.Second))
}

type reqState uint8

const (
	waiting reqState = iota // looking up
	loading
	resolved
)

type req struct {
	rec    report.Request
	keys   []wire.Key
	pd     bool
	state  reqState
	job    uint64
	result *loads.JobResult
}

// prodItem is a PD prefill finishing on a source: register the request as
// remote_decoder, write its blocks, SubmitStore, finish it.
type prodItem struct {
	due  time.Duration
	nd   Node // the incarnation that took the request
	id   string
	keys []wire.Key
}

// New builds the engines of a run over fleet.
func New(cfg Config, fleet Fleet) (*Engine, error) {
	if len(cfg.Consumers) == 0 || len(cfg.Sources) == 0 {
		return nil, errors.New("workload: no consumer or no source rank")
	}
	if fleet == nil {
		return nil, errors.New("workload: nil fleet")
	}
	if cfg.BlockBytes <= 0 {
		cfg.BlockBytes = cfg.Workload.BlockBytes
	}
	e := &Engine{cfg: cfg, fleet: fleet}
	for i, id := range cfg.Consumers {
		c := &consumer{idx: i, id: id, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(i))), jobs: map[uint64]*req{}}
		c.next = c.gap(cfg.Workload.Rate) + cfg.Workload.Start
		e.cons = append(e.cons, c)
	}
	return e, nil
}

// Step is one engine step of every engine at now (since time 0).
func (e *Engine) Step(now time.Duration) {
	e.prefill(now)
	for i, c := range e.cons {
		nd := e.fleet.Consumer(i)
		if nd == nil || nd.Status() != Up {
			continue
		}
		e.arrivals(now, c, nd)
		e.results(now, c, nd)
		if e.lookups(now, c, nd) {
			// on_schedule_end. Only lookups registered this step have
			// anything to flush (PD lookups register none), and the table
			// costs a pass over every session per call: skip it otherwise.
			nd.EndStep()
			nd.Flush()
		}
		nd.Busy(len(c.pending) > 0)
	}
}

func (e *Engine) prefill(now time.Duration) {
	kept := e.prod[:0]
	for _, it := range e.prod {
		if it.due > now || it.nd.Status() == Paused {
			kept = append(kept, it)
			continue
		}
		if it.nd.Status() == Gone {
			continue // the process that was prefilling is gone
		}
		if err := it.nd.NewRequest(it.id, loads.TransferParams{RemoteDecoder: &loads.Remote{KVRequestID: it.id}}); err == nil {
			it.nd.PutBlocks(it.keys) // full of pins: the fetch fails, as it would
			it.nd.SubmitStore(it.id, it.keys)
			it.nd.RequestFinished(it.id)
		}
		it.nd.Flush()
	}
	clear(e.prod[len(kept):])
	e.prod = kept
}

func (e *Engine) arrivals(now time.Duration, c *consumer, nd Node) {
	w := e.cfg.Workload
	for c.next <= now && c.next < w.Stop {
		at := c.next
		c.next += c.gap(w.Rate)
		c.seq++
		j := c.rng.IntN(len(e.cfg.Sources))
		src := e.cfg.Sources[j]
		pd := w.Mode == scenario.ModePD || (w.Mode == scenario.ModeMixed && c.rng.IntN(2) == 0)
		id := fmt.Sprintf("%s#%d", c.id, c.seq)
		q := &req{pd: pd, rec: report.Request{
			ID: id, Consumer: c.id, Source: src.ID, Mode: scenario.ModeSymmetric, Arrived: at,
		}}
		if pd {
			q.rec.Mode = scenario.ModePD
		}
		q.keys = make([]wire.Key, w.Blocks)
		for i := range q.keys {
			q.keys[i] = Key(e.cfg.Seed, c.idx, c.seq, i)
		}
		e.reqs = append(e.reqs, q)
		sn := e.fleet.Source(j)
		switch {
		case sn == nil:
		case pd:
			e.prod = append(e.prod, prodItem{due: at + e.cfg.PrefillDelay, nd: sn, id: id, keys: q.keys})
		default:
			sn.PutBlocks(q.keys) // the source computed this prefix earlier
		}
		if err := nd.NewRequest(id, Params(src, id, pd)); err != nil {
			e.resolve(now, nd, c, q, report.Fallback)
			continue
		}
		c.pending = append(c.pending, q)
	}
	nd.Flush()
}

// Deliver hands consumer i's job results, published by its node nd, to
// the engine. A load reported OK is checked at once (the bytes are in the
// store now); the engine acts on the results at its next step.
func (e *Engine) Deliver(i int, nd Node, rs []loads.JobResult) {
	c := e.cons[i]
	for k := range rs {
		res := rs[k]
		q := c.jobs[res.Job]
		if res.Kind != loads.JobLoad || q == nil || q.state != loading {
			continue
		}
		delete(c.jobs, res.Job)
		if res.OK && !nd.Verify(q.keys) {
			q.rec.Corrupt = true // reported loaded, yet missing or wrong
		}
		q.result = &res
		c.done = append(c.done, q)
	}
}

func (e *Engine) results(now time.Duration, c *consumer, nd Node) {
	if rs := nd.Poll(); len(rs) > 0 {
		e.Deliver(c.idx, nd, rs)
	}
	for _, q := range c.done {
		if q.state != loading {
			continue
		}
		if q.result.OK && !q.rec.Corrupt {
			q.rec.Bytes = uint64(len(q.keys)) * uint64(e.cfg.BlockBytes)
			e.resolve(now, nd, c, q, report.Hit)
		} else {
			q.rec.Deliberate = !q.result.OK && session.Deliberate(q.result.Reason)
			e.resolve(now, nd, c, q, report.Fallback)
		}
	}
	clear(c.done)
	c.done = c.done[:0]
}

// lookups runs one step's lookups; it reports whether any registered a
// key to flush (symmetric).
func (e *Engine) lookups(now time.Duration, c *consumer, nd Node) (registered bool) {
	for _, q := range c.pending {
		if q.state != waiting {
			continue
		}
		v := session.Hit
		if q.pd {
			v = nd.Lookup(q.rec.ID, q.keys[0])
		} else {
			registered = true
			for _, k := range q.keys {
				switch nd.Lookup(q.rec.ID, k) {
				case session.Miss:
					v = session.Miss
				case session.Retry:
					if v == session.Hit {
						v = session.Retry
					}
				}
			}
		}
		switch v {
		case session.Hit:
			job, err := nd.SubmitLoad(q.rec.ID, q.keys)
			if err != nil {
				e.resolve(now, nd, c, q, report.Fallback)
				continue
			}
			q.state, q.job = loading, job
			c.jobs[job] = q
			nd.Flush() // a load that cannot start fails now: its result is in c.done
		case session.Miss:
			e.resolve(now, nd, c, q, report.Fallback)
		}
	}
	kept := c.pending[:0]
	for _, q := range c.pending {
		if q.state != resolved {
			kept = append(kept, q)
		}
	}
	clear(c.pending[len(kept):])
	c.pending = kept
	return registered
}

func (e *Engine) resolve(now time.Duration, nd Node, c *consumer, q *req, o report.Outcome) {
	q.state = resolved
	q.rec.Outcome = o
	q.rec.Resolved = now
	e.resolved++
	if q.job != 0 {
		delete(c.jobs, q.job)
	}
	nd.RequestFinished(q.rec.ID)
}

// EndRun ends the run's lifecycle: what is unresolved stays Stuck and is
// finished on its consumer's current node; pending prefills are dropped.
// Call it after the driver healed its faults.
func (e *Engine) EndRun() {
	for i, c := range e.cons {
		nd := e.fleet.Consumer(i)
		for _, q := range c.pending {
			q.state = resolved // Outcome stays Stuck
			if nd != nil {
				nd.RequestFinished(q.rec.ID)
			}
		}
		c.pending = nil
		if nd != nil {
			nd.Busy(false)
		}
	}
	e.prod = nil
}

// Requests returns the records of every request so far, in arrival order
// per engine step.
func (e *Engine) Requests() []report.Request {
	out := make([]report.Request, len(e.reqs))
	for i, q := range e.reqs {
		out[i] = q.rec
	}
	return out
}

// Counts returns how many requests arrived and how many are resolved.
func (e *Engine) Counts() (requests, resolvedN int) { return len(e.reqs), e.resolved }
