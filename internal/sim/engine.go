package sim

import (
	"bytes"

	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/wire"
	"github.com/kvp2p/kvp2p/internal/workload"
)

// The engines (internal/workload) reach the sim's nodes through these
// adapters: calls go to the node's table at the virtual now, blocks to its
// store, and Flush performs what the table queued (publishing results to
// runner.onResults, which hands them to the engine at once).

// fleet is the runner as the engines' workload.Fleet.
type fleet runner

func (f *fleet) Consumer(i int) workload.Node {
	r := (*runner)(f)
	if nd := r.node(r.cons[i]); nd != nil {
		return engineNode{r, nd}
	}
	return nil
}

func (f *fleet) Source(j int) workload.Node {
	r := (*runner)(f)
	if nd := r.node(r.srcs[j]); nd != nil && !nd.Crashed {
		return engineNode{r, nd}
	}
	return nil
}

// engineNode is one incarnation of a rank as a workload.Node.
type engineNode struct {
	r  *runner
	nd *Node
}

func (e engineNode) Status() workload.Status {
	switch {
	case e.nd.stalled:
		return workload.Paused
	case e.nd.gone || e.nd.Crashed:
		return workload.Gone
	}
	return workload.Up
}

// table is the node's table for a call that may change it: the node is
// touched first, so that its next deadline is looked at again (wake.go).
func (e engineNode) table() *loads.Table {
	e.r.net.touch(e.nd)
	return e.nd.T
}

func (e engineNode) NewRequest(id string, p loads.TransferParams) error {
	return e.table().NewRequest(e.r.net.Now, id, p)
}

func (e engineNode) Lookup(id string, k wire.Key) session.Verdict {
	return e.table().Lookup(e.r.net.Now, id, k)
}

func (e engineNode) EndStep() { e.table().EndStep(e.r.net.Now) }

func (e engineNode) SubmitLoad(id string, keys []wire.Key) (uint64, error) {
	return e.table().SubmitLoad(e.r.net.Now, id, keys), nil
}

func (e engineNode) SubmitStore(id string, keys []wire.Key) {
	e.table().SubmitStore(e.r.net.Now, id, keys)
}

func (e engineNode) RequestFinished(id string) { e.table().RequestFinished(e.r.net.Now, id) }

func (e engineNode) PutBlocks(keys []wire.Key) {
	e.r.net.touch(e.nd)
	buf := make([]byte, e.r.o.StoreBlock)
	for _, k := range keys {
		_, _ = e.nd.Store.Put(k, content(buf, k))
	}
}

func (e engineNode) Verify(keys []wire.Key) bool {
	want := make([]byte, e.r.o.StoreBlock)
	for _, k := range keys {
		sl, ok := e.nd.Store.Lookup(k)
		if !ok || !bytes.Equal(e.nd.Store.Bytes(sl), content(want, k)) {
			return false
		}
	}
	return true
}

func (e engineNode) Flush() { e.r.net.Flush(e.nd) }

// Poll: the sim's results reach the engine through onResults.
func (e engineNode) Poll() []loads.JobResult { return nil }

func (e engineNode) Busy(b bool) {
	e.nd.Busy = b
	if b {
		e.r.net.wake(e.nd)
	}
}

// onResults receives every node's job results as they are published; a
// consumer's are handed to its engine at once.
func (r *runner) onResults(nd *Node, rs []loads.JobResult) {
	rk := r.byID[nd.Rank]
	if rk == nil || rk.cons < 0 {
		return
	}
	r.eng.Deliver(rk.cons, engineNode{r, nd}, rs)
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
	r.eng.EndRun()
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
	out.Requests = r.eng.Requests()
	out.timerErr = n.TimerError()
	out.skipErr = n.SkipError()
	return out
}
