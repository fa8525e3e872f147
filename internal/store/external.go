package store

import (
	"errors"
	"fmt"
	"math"

	"github.com/kvp2p/kvp2p/internal/wire"
)

// External slots: the engine owns the memory.
//
// When kvp2p runs as a sidecar, its slots are the chunks of the engine's
// shared-memory region and the engine decides which chunk holds what. The
// store then keeps only the bookkeeping (NewIndex) and is driven by three
// calls instead of Reserve/Put/eviction:
//
//   - ReserveAt(slot, key): the engine gave this chunk for a load. Free ->
//     Filling, exactly as Reserve, but at the named slot; the fence rules
//     are unchanged (Commit or CancelFill end it, CancelFill only once the writer
//     has provably stopped).
//   - Adopt(slot, key): the engine pinned this chunk, which holds key, for
//     kvp2p to serve. Free -> Ready, indexed and pinned once; a slot that is
//     already Ready under the same key gains one pin.
//   - Drop(slot): the adopter's pin ends. A slot left with no pin leaves the
//     index and is Free again (the engine's, as far as kvp2p knows).
//   - Retire(slot): the engine is gone; the slot leaves the index now and is
//     freed by its last pin's end.
//
// An index-only store never evicts: every Ready slot in it is pinned by an
// adopter, so the LRU list stays empty and Reserve (any slot) returns
// ErrFull rather than hand out a chunk the engine did not give.

// ErrNoArena is returned by Put on an index-only store: the engine writes
// its own memory.
var ErrNoArena = errors.New("store: index-only store has no arena to copy into")

// NewIndex makes an index-only store of numSlots slots of blockBytes: the
// bookkeeping of a region kvp2p does not allocate. Bytes panics on it.
func NewIndex(numSlots, blockBytes int) (*Store, error) {
	if numSlots <= 0 || numSlots > maxSlots {
		return nil, fmt.Errorf("store: %d slots, want 1..%d", numSlots, maxSlots)
	}
	if blockBytes <= 0 {
		return nil, fmt.Errorf("store: block size %d, want > 0", blockBytes)
	}
	return build(nil, numSlots, blockBytes), nil
}

// ReserveAt makes the Free slot Filling for key. It fails with ErrState if
// the slot is out of range or not Free (another job writes it, or a peer
// reads it).
func (s *Store) ReserveAt(slot Slot, key wire.Key) error {
	if err := s.want(slot, StateFree, "reserve"); err != nil {
		return err
	}
	s.takeFree(slot)
	s.meta[slot] = meta{key: key, state: StateFilling}
	s.filling++
	return nil
}

// Adopt records that slot holds key and pins it once for the caller, who
// owes one Drop. A Free slot becomes Ready under key (a previous slot of
// the same key leaves the index: freed if unpinned, else orphaned); a Ready,
// indexed slot of the same key gains a pin. Anything else (Filling, another
// key, an orphan) is ErrState: the caller's idea of the chunk is wrong.
func (s *Store) Adopt(slot Slot, key wire.Key) error {
	if err := s.inRange(slot, "adopt"); err != nil {
		return err
	}
	m := &s.meta[slot]
	switch {
	case m.state == StateFree:
		s.takeFree(slot)
		if old, ok := s.index[key]; ok {
			s.unindex(old)
		}
		*m = meta{key: key, state: StateReady, pins: 1}
		s.ready++
		s.pinned++
		s.index[key] = slot
		return nil
	case m.state == StateReady && !m.orphan && m.key == key:
		if m.pins == math.MaxUint32 {
			return fmt.Errorf("%w: adopt slot %d: pin count overflow", ErrState, slot)
		}
		if m.pins == 0 {
			s.lru.remove(int32(slot))
			s.pinned++
		}
		m.pins++
		return nil
	default:
		return fmt.Errorf("%w: adopt slot %d for key %x: is %v (key %x, orphan %v)", ErrState, slot, key[:4], m.state, m.key[:4], m.orphan)
	}
}

// Drop ends one adopter's pin on slot. A slot left with no pin leaves the
// index and is Free again; one that others still pin stays as it is.
func (s *Store) Drop(slot Slot) error {
	if err := s.want(slot, StateReady, "drop"); err != nil {
		return err
	}
	if err := s.Unpin(slot); err != nil {
		return err
	}
	if m := &s.meta[slot]; m.state == StateReady && m.pins == 0 {
		s.unindex(slot) // an orphan was already freed by Unpin
	}
	return nil
}

// Retire takes a Ready slot out of the index at once, whoever pins it: no
// new reader finds it, and its last Unpin or Drop frees it. For chunks whose
// engine is gone.
func (s *Store) Retire(slot Slot) error {
	if err := s.want(slot, StateReady, "retire"); err != nil {
		return err
	}
	if !s.meta[slot].orphan {
		s.unindex(slot)
	}
	return nil
}

// takeFree removes a Free slot from the free stack in O(1).
func (s *Store) takeFree(slot Slot) {
	i := s.freePos[slot]
	last := len(s.free) - 1
	moved := s.free[last]
	s.free[i] = moved
	s.freePos[moved] = i
	s.free = s.free[:last]
	s.freePos[slot] = -1
}
