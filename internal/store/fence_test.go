package store

import (
	"bytes"
	"errors"
	"testing"
)

// A Filling slot is fenced: whatever else happens, it is not found, not
// pinned, not removed, not evicted and not handed out again until its own
// Commit or CancelFill.

func TestFenceInvisible(t *testing.T) {
	s := newStore(t, 2, 8)
	slot := mustReserve(t, s, key(1))
	if _, ok := s.Lookup(key(1)); ok {
		t.Fatal("Lookup found a Filling slot")
	}
	if s.Contains(key(1)) {
		t.Fatal("Contains found a Filling slot")
	}
	if _, ok := s.PinKey(key(1)); ok {
		t.Fatal("PinKey found a Filling slot")
	}
	mustIs(t, "Pin filling", s.Pin(slot), ErrState)
	if s.Remove(key(1)) {
		t.Fatal("Remove dropped a Filling slot")
	}
	if s.State(slot) != StateFilling {
		t.Fatalf("state %v", s.State(slot))
	}
	check(t, s)
}

func TestFenceAllFillingIsFull(t *testing.T) {
	s := newStore(t, 4, 8)
	for i := range 4 {
		mustReserve(t, s, key(i))
	}
	for i := range 3 {
		if slot, err := s.Reserve(key(10 + i)); err != ErrFull || slot != NoSlot {
			t.Fatalf("Reserve = %d, %v; want ErrFull unwrapped", slot, err)
		}
		if _, err := s.Put(key(10+i), block(8, 1)); err != ErrFull {
			t.Fatalf("Put = %v; want ErrFull", err)
		}
	}
	wantStats(t, s, Stats{Filling: 4})
}

func TestFenceFullWhenPinnedOrFilling(t *testing.T) {
	s := newStore(t, 4, 8)
	pinned := []Slot{mustPut(t, s, key(0), 0), mustPut(t, s, key(1), 1)}
	for _, p := range pinned {
		mustNil(t, "Pin", s.Pin(p))
	}
	filling := []Slot{mustReserve(t, s, key(2)), mustReserve(t, s, key(3))}
	if _, err := s.Reserve(key(4)); !errors.Is(err, ErrFull) {
		t.Fatalf("Reserve = %v; want ErrFull", err)
	}
	wantStats(t, s, Stats{Filling: 2, Ready: 2, Pinned: 2})

	// Releasing one pin makes exactly that slot the victim; the fences hold.
	mustNil(t, "Unpin", s.Unpin(pinned[1]))
	if got := mustReserve(t, s, key(4)); got != pinned[1] {
		t.Fatalf("Reserve = %d, want the unpinned %d", got, pinned[1])
	}
	if _, err := s.Reserve(key(5)); !errors.Is(err, ErrFull) {
		t.Fatalf("Reserve = %v; want ErrFull", err)
	}
	// CancelFill returns a fenced slot, and only then is it reused.
	mustNil(t, "CancelFill", s.CancelFill(filling[0]))
	if got := mustReserve(t, s, key(5)); got != filling[0] {
		t.Fatalf("Reserve = %d, want the abandoned %d", got, filling[0])
	}
	check(t, s)
}

// Under sustained pressure from Put, a fenced slot's bytes and state are
// never touched, and its Commit afterwards publishes exactly what the writer
// wrote.
func TestFenceUnderPressure(t *testing.T) {
	const n, bb = 8, 32
	s := newStore(t, n, bb)
	fenced := mustReserve(t, s, key(1000))
	want := block(bb, 0xEE)
	copy(s.Bytes(fenced), want)
	pinned := mustPut(t, s, key(1001), 0xDD)
	mustNil(t, "Pin", s.Pin(pinned))

	for i := range 5000 {
		slot := mustPut(t, s, key(i), byte(i))
		if slot == fenced || slot == pinned {
			t.Fatalf("Put %d took protected slot %d", i, slot)
		}
		if i%7 == 0 {
			// Re-reserve the fenced key too: a second fill must not touch
			// the first one's slot.
			other := mustReserve(t, s, key(1000))
			if other == fenced {
				t.Fatal("Reserve handed out a Filling slot")
			}
			mustNil(t, "CancelFill", s.CancelFill(other))
		}
	}
	if s.State(fenced) != StateFilling || !bytes.Equal(s.Bytes(fenced), want) {
		t.Fatalf("fenced slot disturbed: %v %x", s.State(fenced), s.Bytes(fenced))
	}
	if !bytes.Equal(s.Bytes(pinned), block(bb, 0xDD)) {
		t.Fatal("pinned slot disturbed")
	}
	st := s.Stats()
	if st.Filling != 1 || st.Evictions < 4990 {
		t.Fatalf("Stats %+v", st)
	}
	check(t, s)

	mustNil(t, "Commit", s.Commit(fenced))
	got, ok := s.Lookup(key(1000))
	if !ok || got != fenced || !bytes.Equal(s.Bytes(got), want) {
		t.Fatalf("after Commit: Lookup = %d, %v", got, ok)
	}
}

// Two fills of one key: the later Commit wins, and the earlier fill, still
// fenced, stays invisible until it too ends.
func TestFenceTwoFillsOneKey(t *testing.T) {
	s := newStore(t, 3, 8)
	a := mustReserve(t, s, key(1))
	b := mustReserve(t, s, key(1))
	copy(s.Bytes(b), block(8, 2))
	mustNil(t, "Commit b", s.Commit(b))
	if got, _ := s.Lookup(key(1)); got != b {
		t.Fatalf("Lookup = %d, want %d", got, b)
	}
	if s.State(a) != StateFilling {
		t.Fatal("the other fill lost its fence")
	}
	copy(s.Bytes(a), block(8, 1))
	mustNil(t, "Commit a", s.Commit(a))
	if got, _ := s.Lookup(key(1)); got != a || s.State(b) != StateFree {
		t.Fatalf("Lookup = %d, want %d; b %v", got, a, s.State(b))
	}
	wantStats(t, s, Stats{Free: 2, Ready: 1})
}
