package node

import (
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest"
)

// A slot reserved for no load, and a pin taken for nobody, are what a
// dropped release leaves behind: SlotUse must count both as orphans, and
// a block the engine put (Ready, unpinned) as nothing.
func TestSlotUseCountsDroppedRelease(t *testing.T) {
	n := startNode(t, nil)
	m := n.Manager()
	u, err := m.SlotUse()
	if err != nil {
		t.Fatal(err)
	}
	if u != (SlotUse{}) {
		t.Fatalf("fresh node: %+v, want nothing held", u)
	}
	k := nodetest.Key("put", 0)
	if err := m.PutBlock(k, nodetest.Bytes(k)); err != nil {
		t.Fatal(err)
	}
	if u, _ = m.SlotUse(); u.InUse() != 0 || u.Orphans() != 0 {
		t.Fatalf("after a put: %+v, want nothing held", u)
	}

	// The dropped release: a load's slot reserved, its job gone.
	var rerr error
	if err := m.do(func(time.Time) { _, rerr = n.st.Reserve(nodetest.Key("leak", 0)) }); err != nil || rerr != nil {
		t.Fatalf("reserve: %v %v", err, rerr)
	}
	if u, _ = m.SlotUse(); u.Filling != 1 || u.LoadSlots != 0 || u.Orphans() != 1 {
		t.Fatalf("after a dropped release: %+v (orphans %d), want 1 Filling orphan", u, u.Orphans())
	}
	// A pin nobody will release, on a node with no session.
	_ = m.do(func(time.Time) { _, _ = n.st.PinKey(k) })
	if u, _ = m.SlotUse(); u.Pinned != 1 || u.InUse() != 2 || u.Orphans() != 2 {
		t.Fatalf("after a dropped unpin: %+v (orphans %d), want 2", u, u.Orphans())
	}
}

func TestSlotUseOrphansArithmetic(t *testing.T) {
	for _, c := range []struct {
		u    SlotUse
		want int
	}{
		{SlotUse{Filling: 4, LoadSlots: 4}, 0},
		{SlotUse{Filling: 5, LoadSlots: 4}, 1},
		{SlotUse{Filling: 3, LoadSlots: 4}, 0}, // never negative
		{SlotUse{Pinned: 3, StorePins: 1, Sessions: 1}, 0},
		{SlotUse{Pinned: 3, StorePins: 1}, 2},
		{SlotUse{Filling: 2, LoadSlots: 1, Pinned: 3, StorePins: 1}, 3},
	} {
		if got := c.u.Orphans(); got != c.want {
			t.Errorf("%+v: orphans %d, want %d", c.u, got, c.want)
		}
	}
}
