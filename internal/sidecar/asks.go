package sidecar

import "github.com/kvp2p/kvp2p/internal/wire"

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
