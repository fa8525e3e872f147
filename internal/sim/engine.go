package sim

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/scenario"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// The engines: one per consumer rank (arrivals, lookups, loads, checks)
// and the prefill side of every source rank (PD stores).

type consumer struct {
	idx     int
	rank    *rank
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
	rec    scenario.Request
	src    *rank
	keys   []wire.Key
	pd     bool
	state  reqState
	job    uint64
	result *loads.JobResult
}

// prodItem is a PD prefill finishing on a source: register the request as
// remote_decoder, write its blocks, SubmitStore, finish it.
type prodItem struct {
	due  time.Time
	nd   *Node // the incarnation that took the request
	id   string
	keys []wire.Key
}

func (r *runner) now() time.Duration { return r.net.Now.Sub(r.zero) }

// step is one engine step of every engine, at the tick grid.
func (r *runner) step() {
	r.prefill()
	for _, c := range r.cons {
		nd := r.node(c.rank)
		if nd == nil || !nd.tickable() {
			continue
		}
		r.arrivals(c, nd)
		r.results(c, nd)
		if r.lookups(c, nd) {
			// on_schedule_end. Only lookups registered this step have
			// anything to flush (PD lookups register none), and the table
			// costs a pass over every session per call: skip it otherwise.
			nd.T.EndStep(r.net.Now)
			r.net.Flush(nd)
		}
		nd.Busy = len(c.pending) > 0
		if nd.Busy {
			r.net.wake(nd)
		}
	}
}

func (r *runner) prefill() {
	kept := r.prod[:0]
	buf := make([]byte, r.o.StoreBlock)
	for _, it := range r.prod {
		if it.due.After(r.net.Now) || it.nd.stalled {
			kept = append(kept, it)
			continue
		}
		if it.nd.gone || it.nd.Crashed {
			continue // the process that was prefilling is gone
		}
		now := r.net.Now
		if err := it.nd.T.NewRequest(now, it.id, loads.TransferParams{RemoteDecoder: &loads.Remote{KVRequestID: it.id}}); err == nil {
			for _, k := range it.keys {
				_, _ = it.nd.Store.Put(k, content(buf, k)) // full of pins: the fetch fails, as it would
			}
			it.nd.T.SubmitStore(now, it.id, it.keys)
			it.nd.T.RequestFinished(now, it.id)
		}
		r.net.Flush(it.nd)
	}
	clear(r.prod[len(kept):])
	r.prod = kept
}

func (r *runner) arrivals(c *consumer, nd *Node) {
	w := r.sc.Workload
	now := r.now()
	for c.next <= now && c.next < w.Stop {
		at := c.next
		c.next += c.gap(w.Rate)
		c.seq++
		src := r.srcs[c.rng.IntN(len(r.srcs))]
		pd := w.Mode == scenario.ModePD || (w.Mode == scenario.ModeMixed && c.rng.IntN(2) == 0)
		id := fmt.Sprintf("%s#%d", c.rank.id, c.seq)
		q := &req{src: src, pd: pd, rec: scenario.Request{
			ID: id, Consumer: c.rank.id, Source: src.id, Mode: scenario.ModeSymmetric, Arrived: at,
		}}
		if pd {
			q.rec.Mode = scenario.ModePD
		}
		q.keys = make([]wire.Key, w.Blocks)
		for i := range q.keys {
			q.keys[i] = r.key(c.idx, c.seq, i)
		}
		r.reqs = append(r.reqs, q)
		sn := r.node(src)
		switch {
		case sn == nil || sn.Crashed:
		case pd:
			r.prod = append(r.prod, prodItem{due: r.zero.Add(at + r.o.PrefillDelay), nd: sn, id: id, keys: q.keys})
		default:
			buf := make([]byte, r.o.StoreBlock)
			for _, k := range q.keys {
				_, _ = sn.Store.Put(k, content(buf, k)) // the source computed this prefix earlier
			}
		}
		if err := nd.T.NewRequest(r.net.Now, id, r.params(src, id, pd)); err != nil {
			r.resolve(nd, c, q, scenario.Fallback)
			continue
		}
		c.pending = append(c.pending, q)
	}
	r.net.Flush(nd)
}

// onResults receives every node's job results as they are published; a
// consumer's loads are checked at once (the bytes are in its store now).
func (r *runner) onResults(nd *Node, rs []loads.JobResult) {
	rk := r.byID[nd.Rank]
	if rk == nil || rk.cons == nil {
		return
	}
	c := rk.cons
	for i := range rs {
		res := rs[i]
		q := c.jobs[res.Job]
		if res.Kind != loads.JobLoad || q == nil || q.state != loading {
			continue
		}
		delete(c.jobs, res.Job)
		if res.OK {
			r.verify(nd, q)
		}
		q.result = &res
		c.done = append(c.done, q)
	}
}

func (r *runner) verify(nd *Node, q *req) {
	want := make([]byte, r.o.StoreBlock)
	for _, k := range q.keys {
		sl, ok := nd.Store.Lookup(k)
		if !ok {
			q.rec.Corrupt = true // reported loaded, yet not there
			return
		}
		if !bytes.Equal(nd.Store.Bytes(sl), content(want, k)) {
			q.rec.Corrupt = true
			return
		}
	}
}

func (r *runner) results(c *consumer, nd *Node) {
	for _, q := range c.done {
		if q.state != loading {
			continue
		}
		if q.result.OK && !q.rec.Corrupt {
			q.rec.Bytes = uint64(len(q.keys)) * uint64(r.sc.Workload.BlockBytes)
			r.resolve(nd, c, q, scenario.Hit)
		} else {
			r.resolve(nd, c, q, scenario.Fallback)
		}
	}
	c.done = c.done[:0]
}

// lookups runs one step's lookups; it reports whether any registered a
// key to flush (symmetric).
func (r *runner) lookups(c *consumer, nd *Node) (registered bool) {
	now := r.net.Now
	for _, q := range c.pending {
		if q.state != waiting {
			continue
		}
		v := session.Hit
		if q.pd {
			v = nd.T.Lookup(now, q.rec.ID, q.keys[0])
		} else {
			registered = true
			for _, k := range q.keys {
				switch nd.T.Lookup(now, q.rec.ID, k) {
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
			q.state = loading
			q.job = nd.T.SubmitLoad(now, q.rec.ID, q.keys)
			c.jobs[q.job] = q
			r.net.Flush(nd) // a load that cannot start fails now: its result is in c.done
		case session.Miss:
			r.resolve(nd, c, q, scenario.Fallback)
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

func (r *runner) resolve(nd *Node, c *consumer, q *req, o scenario.Outcome) {
	q.state = resolved
	q.rec.Outcome = o
	q.rec.Resolved = r.now()
	if q.job != 0 {
		delete(c.jobs, q.job)
	}
	nd.T.RequestFinished(r.net.Now, q.rec.ID)
}

// finish ends the run: what is unresolved is stuck; then every fault is
// healed, every request finished, every table shut down and drained, and
// the slots still held are counted.
func (r *runner) finish() Result {
	n := r.net
	for _, rk := range r.ranks {
		if nd := r.node(rk); nd != nil {
			r.mustNode(n.heal(nd))
		}
	}
	for _, c := range r.cons {
		nd := r.node(c.rank)
		for _, q := range c.pending {
			q.state = resolved // Outcome stays Stuck
			nd.T.RequestFinished(n.Now, q.rec.ID)
		}
		c.pending = nil
		nd.Busy = false
	}
	r.prod = nil
	for _, nd := range n.order {
		nd.T.Shutdown(n.Now)
	}
	n.flushAll()
	n.FineAll = true
	drained := false
	for limit := n.Now.Add(r.o.MaxDrain); !drained && n.Now.Before(limit); {
		n.advance(r.o.Tick)
		drained = true
		for _, nd := range n.order {
			if !nd.T.Drained() {
				drained = false
				break
			}
		}
	}
	out := Result{Drained: drained, Events: n.Events, Ticks: n.ticks, Nodes: len(n.order)}
	for _, nd := range n.order {
		st := nd.Store.Stats()
		out.Leaked += st.Filling + st.Pinned
	}
	out.Requests = make([]scenario.Request, len(r.reqs))
	for i, q := range r.reqs {
		out.Requests[i] = q.rec
	}
	return out
}
