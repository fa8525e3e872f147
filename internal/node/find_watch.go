package node

import (
	"errors"
	"time"

	"github.com/kvp2p/kvp2p/internal/summary"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// SummaryWatcher receives, in the node's loop, each part of a peer's
// summary the node applies (m), or nil when the node dropped the peer's
// summary. It must not block; it returns false to stop watching.
type SummaryWatcher func(peer string, m *wire.Summary) bool

// watcher is one WatchSummaries caller and the peers it has whole.
type watcher struct {
	w SummaryWatcher
	// synced: peers whose snapshot it got, so it takes their parts. A
	// peer in the middle of an update when the watch began is sent whole
	// once that update's last part is applied.
	synced map[string]bool
}

// WatchSummaries gives w a snapshot of every usable peer summary at once,
// then every part applied and every peer dropped, until w returns false or
// stop is called. It runs w in the loop. An error: finding is off, or the
// node stopped.
func (n *Node) WatchSummaries(w SummaryWatcher) (stop func(), err error) {
	if n.find == nil {
		return nil, errors.New("node: find is off")
	}
	id := 0
	if err := n.Do(func(time.Time) {
		f := n.find
		wt := &watcher{w: w, synced: map[string]bool{}}
		for _, p := range f.index.Peers() {
			if !wt.snapshot(f.index, p) {
				return
			}
		}
		f.watchID++
		id = f.watchID
		f.watchers[id] = wt
	}); err != nil {
		return nil, err
	}
	return func() { _ = n.Do(func(time.Time) { delete(n.find.watchers, id) }) }, nil
}

// snapshot sends peer's whole summary if it is usable; false: the watcher
// stopped.
func (wt *watcher) snapshot(x *summary.Index, peer string) bool {
	parts := x.Snapshot(peer)
	if parts == nil {
		return true
	}
	for i := range parts {
		if !wt.w(peer, &parts[i]) {
			return false
		}
	}
	wt.synced[peer] = true
	return true
}

// tell hands a peer's applied part (or nil: dropped) to the watchers.
func (f *finder) tell(peer string, m *wire.Summary) {
	for id, wt := range f.watchers {
		ok := true
		switch {
		case m == nil:
			if wt.synced[peer] {
				delete(wt.synced, peer)
				ok = wt.w(peer, nil)
			}
		case wt.synced[peer]:
			ok = wt.w(peer, m)
		case m.Last:
			ok = wt.snapshot(f.index, peer) // the first whole state it can take
		}
		if !ok {
			delete(f.watchers, id)
		}
	}
}
