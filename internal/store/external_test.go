package store

import (
	"errors"
	"testing"

	"github.com/kvp2p/kvp2p/internal/wire"
)

// An index-only store: the engine's chunks, adopted, pinned by readers,
// dropped, retired; a chunk nobody pins is Free again, never cached.
func TestIndexOnlyLifecycle(t *testing.T) {
	s, err := NewIndex(4, 64)
	if err != nil {
		t.Fatal(err)
	}
	k := wire.Key{1}
	if err := s.Adopt(2, k); err != nil {
		t.Fatal(err)
	}
	if sl, ok := s.Lookup(k); !ok || sl != 2 {
		t.Fatalf("adopted chunk not found: %v %v", sl, ok)
	}
	// A reader pins it; the adopter drops its pin: still served to the
	// reader, still indexed.
	if sl, ok := s.PinKey(k); !ok || sl != 2 {
		t.Fatal("PinKey")
	}
	if err := s.Drop(2); err != nil {
		t.Fatal(err)
	}
	if s.State(2) != StateReady || s.Pins(2) != 1 {
		t.Fatalf("reader's chunk: %v, %d pins", s.State(2), s.Pins(2))
	}
	// The reader's Unpin gives it back to the engine: Free, out of the index.
	if err := s.Unpin(2); err != nil {
		t.Fatal(err)
	}
	if s.State(2) != StateFree || s.Contains(k) {
		t.Fatalf("unpinned chunk: %v, indexed %v", s.State(2), s.Contains(k))
	}
	// Retire: out of the index at once, freed by its last pin.
	if err := s.Adopt(1, k); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.PinKey(k); !ok {
		t.Fatal("PinKey")
	}
	if err := s.Retire(1); err != nil {
		t.Fatal(err)
	}
	if s.Contains(k) || !s.Orphaned(1) {
		t.Fatal("retired chunk still indexed")
	}
	if err := s.Adopt(1, k); !errors.Is(err, ErrState) {
		t.Fatalf("adopting a retired chunk: %v", err)
	}
	_ = s.Drop(1)
	_ = s.Unpin(1)
	if s.State(1) != StateFree {
		t.Fatalf("retired chunk after its last pin: %v", s.State(1))
	}
	// ReserveAt only on a Free chunk; Reserve never hands out a chunk the
	// engine did not give.
	if err := s.ReserveAt(3, k); err != nil {
		t.Fatal(err)
	}
	if err := s.ReserveAt(3, k); !errors.Is(err, ErrState) {
		t.Fatalf("ReserveAt twice: %v", err)
	}
	if err := s.CancelFill(3); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(k, make([]byte, 64)); !errors.Is(err, ErrNoArena) {
		t.Fatalf("Put on an index-only store: %v", err)
	}
}
