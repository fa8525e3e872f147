package store

import (
	"errors"
	"fmt"
)

// Check verifies every invariant of the store and returns the first
// violation found, or nil. It is O(NumSlots), allocates, and is meant for
// tests and debugging, not for the hot path.
//
// The invariants:
//   - each slot's state is Free, Filling or Ready; a Free slot has no key;
//   - only Ready slots have pins; an orphan is Ready and pinned;
//   - the counters match a recount, and Free+Filling+Ready == NumSlots;
//   - the free stack holds exactly the Free slots, each once;
//   - the index holds exactly the non-orphan Ready slots, each under its key;
//   - the LRU ring is well linked and holds exactly the indexed, unpinned
//     Ready slots: no Filling, Free, pinned or orphaned slot is evictable.
func (s *Store) Check() error {
	var c Stats
	for i := range s.meta {
		m := &s.meta[i]
		switch m.state {
		case StateFree:
			c.Free++
			if m.key != (meta{}).key {
				return fmt.Errorf("store: free slot %d keeps key %x", i, m.key)
			}
		case StateFilling:
			c.Filling++
		case StateReady:
			c.Ready++
		default:
			return fmt.Errorf("store: slot %d in unknown %v", i, m.state)
		}
		if m.pins > 0 {
			if m.state != StateReady {
				return fmt.Errorf("store: %v slot %d has %d pins", m.state, i, m.pins)
			}
			c.Pinned++
		}
		if m.orphan {
			if m.state != StateReady || m.pins == 0 {
				return fmt.Errorf("store: orphan slot %d is %v with %d pins", i, m.state, m.pins)
			}
			c.Orphaned++
		}
		evictable := m.state == StateReady && m.pins == 0 && !m.orphan
		if listed := s.lru.contains(int32(i)); listed != evictable {
			return fmt.Errorf("store: slot %d (%v, %d pins, orphan %v): on LRU %v, want %v",
				i, m.state, m.pins, m.orphan, listed, evictable)
		}
	}
	c.Evictions = s.evictions
	if got := s.Stats(); got != c {
		return fmt.Errorf("store: counters %+v, recount %+v", got, c)
	}
	if c.Free+c.Filling+c.Ready != len(s.meta) {
		return fmt.Errorf("store: %+v does not add up to %d slots", c, len(s.meta))
	}

	seen := make([]bool, len(s.meta))
	for i, slot := range s.free {
		if int(slot) >= len(s.meta) || s.meta[slot].state != StateFree || seen[slot] {
			return fmt.Errorf("store: free stack holds slot %d wrongly", slot)
		}
		if s.freePos[slot] != int32(i) {
			return fmt.Errorf("store: free slot %d at %d, position says %d", slot, i, s.freePos[slot])
		}
		seen[slot] = true
	}
	for slot, pos := range s.freePos {
		if (pos >= 0) != seen[slot] {
			return fmt.Errorf("store: slot %d position %d, free %v", slot, pos, seen[slot])
		}
	}
	if cap(s.free) != len(s.meta) {
		return errors.New("store: free stack reallocated")
	}

	if len(s.index) != c.Ready-c.Orphaned {
		return fmt.Errorf("store: index has %d keys, want %d", len(s.index), c.Ready-c.Orphaned)
	}
	for key, slot := range s.index {
		if int(slot) >= len(s.meta) {
			return fmt.Errorf("store: key %x indexes slot %d out of range", key, slot)
		}
		m := &s.meta[slot]
		if m.state != StateReady || m.orphan || m.key != key {
			return fmt.Errorf("store: key %x indexes slot %d (%v, orphan %v, key %x)",
				key, slot, m.state, m.orphan, m.key)
		}
	}

	if _, err := s.lru.members(); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}
