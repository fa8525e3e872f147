package store

import (
	"bytes"
	"errors"
	"math"
	"testing"
)

func TestNewErrors(t *testing.T) {
	for _, tc := range []struct{ n, bb int }{
		{0, 8}, {-1, 8}, {4, 0}, {4, -8}, {maxSlots + 1, 1}, {1 << 30, 1 << 40},
	} {
		if s, err := New(tc.n, tc.bb); err == nil || s != nil {
			t.Errorf("New(%d, %d) = %v, %v; want error", tc.n, tc.bb, s, err)
		}
	}
	for _, tc := range []struct{ n, bb int }{{0, 8}, {12, 8}, {16, 0}, {16, -1}} {
		if s, err := NewOn(make([]byte, tc.n), tc.bb); err == nil || s != nil {
			t.Errorf("NewOn(%d bytes, %d) = %v, %v; want error", tc.n, tc.bb, s, err)
		}
	}
}

func TestNewFresh(t *testing.T) {
	s := newStore(t, 4, 16)
	if s.NumSlots() != 4 || s.BlockBytes() != 16 {
		t.Fatalf("NumSlots %d BlockBytes %d", s.NumSlots(), s.BlockBytes())
	}
	wantStats(t, s, Stats{Free: 4})
	for i := range Slot(4) {
		if s.State(i) != StateFree || s.Pins(i) != 0 || s.Orphaned(i) {
			t.Fatalf("slot %d not fresh", i)
		}
		if _, ok := s.Key(i); ok {
			t.Fatalf("Key(%d) on a free slot", i)
		}
	}
	// Slot 0 first, so a fresh store fills its arena from the start.
	if slot := mustReserve(t, s, key(0)); slot != 0 {
		t.Fatalf("first Reserve = %d, want 0", slot)
	}
}

func TestNewOnUsesArena(t *testing.T) {
	arena := make([]byte, 3*8)
	s, err := NewOn(arena, 8)
	mustNil(t, "NewOn", err)
	if s.NumSlots() != 3 {
		t.Fatalf("NumSlots = %d", s.NumSlots())
	}
	slot := mustPut(t, s, key(1), 0x5A)
	if !bytes.Equal(arena[int(slot)*8:int(slot)*8+8], block(8, 0x5A)) {
		t.Fatal("Put did not write into the caller's arena")
	}
}

func TestBytes(t *testing.T) {
	s := newStore(t, 3, 8)
	for i := range Slot(3) {
		b := s.Bytes(i)
		if len(b) != 8 || cap(b) != 8 {
			t.Fatalf("Bytes(%d): len %d cap %d", i, len(b), cap(b))
		}
		copy(b, block(8, byte(i+1)))
	}
	// Appending must reallocate rather than spill into the next slot.
	_ = append(s.Bytes(0), 0xFF)
	for i := range Slot(3) {
		if !bytes.Equal(s.Bytes(i), block(8, byte(i+1))) {
			t.Fatalf("slot %d clobbered: %x", i, s.Bytes(i))
		}
	}
	for _, bad := range []Slot{3, NoSlot} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Bytes(%d) did not panic", bad)
				}
			}()
			s.Bytes(bad)
		}()
	}
}

func TestStateString(t *testing.T) {
	for st, want := range map[State]string{StateFree: "free", StateFilling: "filling", StateReady: "ready", 9: "state(9)"} {
		if st.String() != want {
			t.Errorf("%d.String() = %q, want %q", st, st.String(), want)
		}
	}
}

func TestReserveCommitLookup(t *testing.T) {
	s := newStore(t, 2, 8)
	slot := mustReserve(t, s, key(1))
	if s.State(slot) != StateFilling {
		t.Fatalf("after Reserve: %v", s.State(slot))
	}
	if k, ok := s.Key(slot); !ok || k != key(1) {
		t.Fatalf("Key = %x, %v", k, ok)
	}
	wantStats(t, s, Stats{Free: 1, Filling: 1})
	copy(s.Bytes(slot), block(8, 7))
	mustNil(t, "Commit", s.Commit(slot))
	wantStats(t, s, Stats{Free: 1, Ready: 1})
	got, ok := s.Lookup(key(1))
	if !ok || got != slot || !bytes.Equal(s.Bytes(got), block(8, 7)) {
		t.Fatalf("Lookup = %d, %v", got, ok)
	}
	if !s.Contains(key(1)) || s.Contains(key(2)) {
		t.Fatal("Contains wrong")
	}
	if got, ok := s.Lookup(key(2)); ok || got != NoSlot {
		t.Fatalf("Lookup(miss) = %d, %v", got, ok)
	}
}

func TestStateErrors(t *testing.T) {
	s := newStore(t, 3, 8)
	ready := mustPut(t, s, key(1), 1)
	filling := mustReserve(t, s, key(2))
	free := Slot(2)
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"Commit free", s.Commit(free)},
		{"Commit ready", s.Commit(ready)},
		{"Commit out of range", s.Commit(3)},
		{"Commit NoSlot", s.Commit(NoSlot)},
		{"CancelFill free", s.CancelFill(free)},
		{"CancelFill ready", s.CancelFill(ready)},
		{"CancelFill out of range", s.CancelFill(3)},
		{"Pin free", s.Pin(free)},
		{"Pin filling", s.Pin(filling)},
		{"Pin out of range", s.Pin(NoSlot)},
		{"Unpin free", s.Unpin(free)},
		{"Unpin filling", s.Unpin(filling)},
		{"Unpin unpinned ready", s.Unpin(ready)},
		{"Unpin out of range", s.Unpin(3)},
	} {
		mustIs(t, tc.name, tc.err, ErrState)
	}
	wantStats(t, s, Stats{Free: 1, Filling: 1, Ready: 1})

	_, err := s.Put(key(3), make([]byte, 7))
	mustIs(t, "Put short", err, ErrSize)
	_, err = s.Put(key(3), make([]byte, 9))
	mustIs(t, "Put long", err, ErrSize)
	wantStats(t, s, Stats{Free: 1, Filling: 1, Ready: 1})
}

func TestCancelFill(t *testing.T) {
	s := newStore(t, 1, 8)
	slot := mustReserve(t, s, key(1))
	mustNil(t, "CancelFill", s.CancelFill(slot))
	if s.State(slot) != StateFree || s.Contains(key(1)) {
		t.Fatal("abandoned slot still holds its key")
	}
	if _, ok := s.Key(slot); ok {
		t.Fatal("Key on an abandoned slot")
	}
	wantStats(t, s, Stats{Free: 1})
	mustIs(t, "second CancelFill", s.CancelFill(slot), ErrState)
}

func TestLRUOrder(t *testing.T) {
	s := newStore(t, 3, 8)
	a, b := mustPut(t, s, key(1), 1), mustPut(t, s, key(2), 2)
	mustPut(t, s, key(3), 3)
	// Lookup touches: a becomes most recent, so b is the victim.
	s.Lookup(key(1))
	if got := mustPut(t, s, key(4), 4); got != b || s.Contains(key(2)) {
		t.Fatalf("evicted %d, want %d", got, b)
	}
	// Contains does not touch: key(3) stays the oldest.
	s.Contains(key(3))
	if got := mustPut(t, s, key(5), 5); s.Contains(key(3)) || got == a {
		t.Fatalf("Contains refreshed key(3); evicted %d", got)
	}
	wantStats(t, s, Stats{Ready: 3, Evictions: 2})
}

func TestPinUnpin(t *testing.T) {
	s := newStore(t, 2, 8)
	a := mustPut(t, s, key(1), 1)
	b := mustPut(t, s, key(2), 2)
	mustNil(t, "Pin", s.Pin(a))
	mustNil(t, "Pin again", s.Pin(a))
	if s.Pins(a) != 2 {
		t.Fatalf("Pins = %d", s.Pins(a))
	}
	wantStats(t, s, Stats{Ready: 2, Pinned: 1})
	// a is older but pinned: b is evicted.
	if got := mustPut(t, s, key(3), 3); got != b {
		t.Fatalf("evicted %d, want %d", got, b)
	}
	mustNil(t, "Unpin", s.Unpin(a))
	wantStats(t, s, Stats{Ready: 2, Pinned: 1, Evictions: 1})
	mustNil(t, "Unpin", s.Unpin(a))
	wantStats(t, s, Stats{Ready: 2, Evictions: 1})
	// The last Unpin made a the most recent, so key(3) goes next.
	if got := mustPut(t, s, key(4), 4); got != b || !s.Contains(key(1)) {
		t.Fatalf("evicted %d, want %d", got, b)
	}
	mustIs(t, "Unpin unpinned", s.Unpin(a), ErrState)
}

func TestPinOverflow(t *testing.T) {
	s := newStore(t, 1, 8)
	a := mustPut(t, s, key(1), 1)
	mustNil(t, "Pin", s.Pin(a))
	s.meta[a].pins = math.MaxUint32 // white box: 4e9 pins would take too long
	mustIs(t, "Pin overflow", s.Pin(a), ErrState)
	if _, ok := s.PinKey(key(1)); ok {
		t.Fatal("PinKey succeeded past overflow")
	}
}

func TestPinKey(t *testing.T) {
	s := newStore(t, 2, 8)
	if slot, ok := s.PinKey(key(1)); ok || slot != NoSlot {
		t.Fatalf("PinKey(miss) = %d, %v", slot, ok)
	}
	filling := mustReserve(t, s, key(1))
	if _, ok := s.PinKey(key(1)); ok {
		t.Fatal("PinKey found a Filling slot")
	}
	mustNil(t, "Commit", s.Commit(filling))
	slot, ok := s.PinKey(key(1))
	if !ok || slot != filling || s.Pins(slot) != 1 {
		t.Fatalf("PinKey = %d, %v", slot, ok)
	}
	wantStats(t, s, Stats{Free: 1, Ready: 1, Pinned: 1})
}

func TestRemove(t *testing.T) {
	s := newStore(t, 2, 8)
	if s.Remove(key(1)) {
		t.Fatal("Remove of an absent key")
	}
	a := mustPut(t, s, key(1), 1)
	if !s.Remove(key(1)) || s.State(a) != StateFree || s.Contains(key(1)) {
		t.Fatal("Remove of an unpinned key did not free it")
	}
	wantStats(t, s, Stats{Free: 2})

	filling := mustReserve(t, s, key(2))
	if s.Remove(key(2)) || s.State(filling) != StateFilling {
		t.Fatal("Remove touched a Filling slot")
	}
	mustNil(t, "CancelFill", s.CancelFill(filling))
}

func TestRemovePinnedOrphans(t *testing.T) {
	s := newStore(t, 2, 8)
	a := mustPut(t, s, key(1), 1)
	mustNil(t, "Pin", s.Pin(a))
	mustNil(t, "Pin", s.Pin(a))
	if !s.Remove(key(1)) {
		t.Fatal("Remove")
	}
	if s.State(a) != StateReady || !s.Orphaned(a) || s.Contains(key(1)) {
		t.Fatal("removed pinned slot is not an orphan")
	}
	if k, ok := s.Key(a); !ok || k != key(1) {
		t.Fatal("orphan lost its key")
	}
	wantStats(t, s, Stats{Free: 1, Ready: 1, Pinned: 1, Orphaned: 1})
	mustIs(t, "Pin orphan", s.Pin(a), ErrState)
	if s.Remove(key(1)) {
		t.Fatal("Remove found an orphan")
	}
	mustNil(t, "Unpin", s.Unpin(a))
	wantStats(t, s, Stats{Free: 1, Ready: 1, Pinned: 1, Orphaned: 1})
	mustNil(t, "Unpin", s.Unpin(a))
	if s.State(a) != StateFree || s.Orphaned(a) {
		t.Fatal("last Unpin did not free the orphan")
	}
	wantStats(t, s, Stats{Free: 2})
}

func TestCommitSupersedes(t *testing.T) {
	s := newStore(t, 3, 8)
	old := mustPut(t, s, key(1), 1)
	// Unpinned: the old slot is freed at once.
	slot := mustPut(t, s, key(1), 2)
	if got, _ := s.Lookup(key(1)); got != slot || s.State(old) != StateFree {
		t.Fatal("Commit did not replace an unpinned duplicate")
	}
	wantStats(t, s, Stats{Free: 2, Ready: 1})

	// Pinned: the old slot is orphaned, keeps its bytes, and is never
	// handed out before its last Unpin.
	mustNil(t, "Pin", s.Pin(slot))
	newer := mustPut(t, s, key(1), 3)
	if !s.Orphaned(slot) || !bytes.Equal(s.Bytes(slot), block(8, 2)) {
		t.Fatal("pinned duplicate not orphaned intact")
	}
	wantStats(t, s, Stats{Free: 1, Ready: 2, Pinned: 1, Orphaned: 1})
	mustPut(t, s, key(2), 4)
	// Fill the two evictable slots with fences; only the orphan is left.
	if a, b := mustReserve(t, s, key(3)), mustReserve(t, s, key(4)); a == slot || b == slot || a != newer {
		t.Fatalf("Reserve took %d, %d; orphan is %d, oldest ready %d", a, b, slot, newer)
	}
	if _, err := s.Reserve(key(5)); !errors.Is(err, ErrFull) {
		t.Fatalf("Reserve with only an orphan left: %v, want ErrFull", err)
	}
	mustNil(t, "Unpin", s.Unpin(slot))
	if s.State(slot) != StateFree {
		t.Fatal("orphan not freed at last Unpin")
	}
	if got := mustReserve(t, s, key(5)); got != slot {
		t.Fatalf("Reserve = %d, want the freed orphan %d", got, slot)
	}
	check(t, s)
}

func TestCheckDetectsCorruption(t *testing.T) {
	for name, corrupt := range map[string]func(s *Store){
		"pins on free":       func(s *Store) { s.meta[3].pins = 1 },
		"filling on lru":     func(s *Store) { s.meta[0].state = StateFilling },
		"counter drift":      func(s *Store) { s.ready++ },
		"index to free slot": func(s *Store) { s.index[key(9)] = 3 },
		"free key kept":      func(s *Store) { s.meta[3].key = key(1) },
		"free stack dup":     func(s *Store) { s.free = append(s.free, 3) },
		"orphan unpinned":    func(s *Store) { s.meta[0].orphan = true; s.orphaned++ },
		"lru broken link":    func(s *Store) { s.lru.links[0].prev = 2 },
		"pinned on lru":      func(s *Store) { s.meta[0].pins = 1; s.pinned++ },
	} {
		s := newStore(t, 4, 8)
		for i := range 3 {
			mustPut(t, s, key(i), byte(i))
		}
		check(t, s)
		corrupt(s)
		if err := s.Check(); err == nil {
			t.Errorf("%s: Check passed", name)
		}
	}
}
