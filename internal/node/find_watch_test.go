package node

import (
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/summary"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// TestWatcherSync: a watcher that began while a peer's update was half
// applied gets that peer whole once the update's last part is applied,
// then its parts; a peer dropped is told once; a watcher that returns
// false is forgotten.
func TestWatcherSync(t *testing.T) {
	f, err := newFinder(Config{Slots: 64, Incarnation: 1, Find: FindConfig{Enabled: true}}.withDefaults(), true)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := summary.NewProducer(64, 9)
	_ = p.Store(1, wire.Key{1})
	snap := p.Snapshot()
	// Split the snapshot in two parts by hand: the first, then a watch.
	first, rest := snap[0], snap[0]
	first.Last, rest.Reset = false, false
	first.Words, first.Values, rest.Words, rest.Values = nil, nil, snap[0].Words, snap[0].Values
	now := time.Unix(0, 0)
	if err := f.index.Apply("a", &first, now); err != nil {
		t.Fatal(err)
	}
	var got []string
	wt := &watcher{synced: map[string]bool{}, w: func(peer string, m *wire.Summary) bool {
		switch {
		case m == nil:
			got = append(got, peer+" gone")
		case m.Reset:
			got = append(got, peer+" snapshot")
		default:
			got = append(got, peer+" part")
		}
		return true
	}}
	f.watchers[1] = wt
	for _, pt := range f.index.Peers() {
		wt.snapshot(f.index, pt) // as WatchSummaries does: nothing usable yet
	}
	if err := f.index.Apply("a", &rest, now); err != nil {
		t.Fatal(err)
	}
	f.tell("a", &rest)
	d := p.Flush()
	if err := f.index.Apply("a", &d[0], now); err != nil {
		t.Fatal(err)
	}
	f.tell("a", &d[0])
	f.tell("a", nil)
	f.tell("a", nil)
	want := []string{"a snapshot", "a part", "a gone"}
	if len(got) != len(want) {
		t.Fatalf("told %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("told %v, want %v", got, want)
		}
	}
	wt.w = func(string, *wire.Summary) bool { return false }
	wt.synced["a"] = true
	f.tell("a", &d[0])
	if len(f.watchers) != 0 {
		t.Fatal("a watcher that stopped is still told")
	}
}
