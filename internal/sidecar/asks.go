package sidecar

import (
	"time"

	"github.com/kvp2p/kvp2p/internal/node"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// A peer's lookup of a key the sidecar does not hold asks the engine for
// it (ServeAsk) and waits for the answer. The keys asked and not answered
// yet are shared among the sessions as lookup pins are (internal/loads/
// pins.go): maxAskedKeys in all, and one session at most
// maxAskedKeys/(k+1) of them, k the sessions with keys asked counting
// itself. A peer looking up keys nobody holds, as fast as it may, then
// cannot take the asks a healthy consumer's lookups need (issue 25: per
// peer quotas on lookups in flight): the engine takes its time to answer
// (a scheduler step or more), and before, 1024 asks in all were the limit
// whoever made them. A key over either bound is a MISS.

// mayAsk reports whether session asker may ask the engine one key more.
func (e *engine) mayAsk(asker uint64) bool {
	if len(e.asked) >= maxAskedKeys {
		return false
	}
	k := len(e.askedBy)
	if e.askedBy[asker] == 0 {
		k++
	}
	return e.askedBy[asker] < max(1, maxAskedKeys/(k+1))
}

// answered forgets that k was asked (the engine answered, or the ask
// expired), and who asked it.
func (e *engine) answered(k wire.Key) {
	asker, ok := e.asked[k]
	if !ok {
		return
	}
	delete(e.asked, k)
	if e.askedBy[asker]--; e.askedBy[asker] <= 0 {
		delete(e.askedBy, asker)
	}
}

// An ask the engine has not answered within engine.serve_timeout is
// answered MISS, and the peer's request prefills. Slow is not stopped:
// vLLM serves an ask only at its next scheduler step, and an engine
// starved of CPU (every core busy; its processes runnable, none stopped)
// steps every few seconds, so a MISS then is a false fallback while the
// blocks are there. Such an engine gets what the stall probe gives it
// (probeVerdict, stall.go): up to starvedGrace more serve_timeouts, and
// at each one the peers whose lookups wait on the ask are told the lookup
// is still pending (wire.LookupPending), which re-arms their lookup
// deadline within its cap. A stopped engine or worker (SIGSTOP), a tree
// that cannot be read, or an engine with no request in flight (an idle
// vLLM 0.32 engine does not step at all, starved or not) gets none: MISS
// at serve_timeout as before.

// expireAsks judges the asks past their serve_timeouts (at every tick).
func (e *engine) expireAsks(n *node.Node, now time.Time, tree func() (runnable, stopped bool)) {
	var keep map[wire.Key]bool // keys of the asks given grace this tick
	for id, a := range e.asks {
		if now.Sub(a.at) < e.cfg.ServeTimeout {
			continue
		}
		stop, grace := probeVerdict(now.Sub(a.at), e.cfg.ServeTimeout, a.grace, tree)
		if !stop {
			if grace > a.grace {
				a.grace = grace
				if keep == nil {
					keep = map[wire.Key]bool{}
				}
				for _, k := range a.keys {
					keep[k] = true
				}
			}
			continue
		}
		// A peer's request will prefill without these blocks: say why
		// here, where it is decided (rate-limited per message).
		n.Log().Info("the engine did not serve a peer's lookup within engine.serve_timeout: answered MISS",
			"keys", len(a.keys), "waited", now.Sub(a.at), "starved_grace", a.grace)
		delete(e.asks, id)
		for _, k := range a.keys {
			e.answered(k)
			e.missed[k] = now.Add(missMemory)
		}
	}
	if keep == nil {
		return
	}
	told := n.Table().SayLookupsPending(now, func(k wire.Key) bool { return keep[k] })
	n.Log().Info("engine starved: lookup kept pending",
		"keys", len(keep), "lookups", told, "requests", len(e.reqs), "up_to", e.cfg.ServeTimeout*(1+starvedGrace))
}

// treeOnce returns the engine's process-tree state as probeVerdict reads
// it, read at most once per call of treeOnce (a tick: the asks' and the
// stall probe's verdicts share it), and only when asked. An engine with no request in flight reads as not runnable: no
// step is due, so waiting longer for one is no use.
func (e *engine) treeOnce() func() (runnable, stopped bool) {
	read := false
	var runnable, stopped bool
	return func() (bool, bool) {
		if !read {
			read = true
			if len(e.reqs) > 0 {
				runnable, stopped = e.tree(e.pid)
			}
		}
		return runnable, stopped
	}
}
