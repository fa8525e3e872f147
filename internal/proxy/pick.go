package proxy

import "sync"

// pool is the engines of one role and the requests each has in flight
// through this proxy. Its lock is never held across I/O.
type pool struct {
	engines []Engine
	pick    Pick

	mu   sync.Mutex
	busy []int // requests in flight, per engine
	next int   // where the next round-robin turn or tie-break starts
}

func newPool(engines []Engine, pick Pick) *pool {
	return &pool{engines: engines, pick: pick, busy: make([]int, len(engines))}
}

// acquire picks an engine and counts a request on it; the caller must
// release it. prefer (or -1) is an engine the caller would rather have:
// under PickLeastLoaded it wins when it is among the least loaded.
func (p *pool) acquire(prefer int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.engines)
	i := p.next
	if p.pick == PickLeastLoaded {
		for k := 1; k < n; k++ {
			if j := (p.next + k) % n; p.busy[j] < p.busy[i] {
				i = j
			}
		}
		if prefer >= 0 && prefer < n && p.busy[prefer] == p.busy[i] {
			i = prefer
		}
	}
	p.next = (i + 1) % n
	p.busy[i]++
	return i
}

// release ends a request acquire counted on engine i.
func (p *pool) release(i int) {
	p.mu.Lock()
	p.busy[i]--
	p.mu.Unlock()
}

// load is the requests in flight on each engine, for tests and /health.
func (p *pool) load() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int(nil), p.busy...)
}
