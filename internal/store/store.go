package store

import (
	"errors"
	"fmt"
	"math"

	"github.com/kvp2p/kvp2p/internal/wire"
)

// Slot numbers a block-sized span of the arena, from 0 to NumSlots()-1.
type Slot uint32

// NoSlot is returned with a miss or an error; it is never a valid slot.
const NoSlot Slot = ^Slot(0)

// State is where a slot is in its life; see the package doc.
type State uint8

const (
	StateFree    State = iota // holds nothing; Reserve may hand it out
	StateFilling              // reserved for a key and being written: fenced
	StateReady                // holds its key's block; readable, pinnable
)

func (st State) String() string {
	switch st {
	case StateFree:
		return "free"
	case StateFilling:
		return "filling"
	case StateReady:
		return "ready"
	}
	return fmt.Sprintf("state(%d)", uint8(st))
}

var (
	// ErrFull means every slot is Filling or pinned: nothing can be reused
	// until a fill ends or a reader lets go. It is returned unwrapped.
	ErrFull = errors.New("store: no free or evictable slot")
	// ErrState means the slot does not exist or is in the wrong state for
	// the call; it is wrapped with the detail. It reveals a bug in the
	// owner's bookkeeping, or a stale slot number from a peer.
	ErrState = errors.New("store: slot in wrong state")
	// ErrSize means Put was given data that is not exactly one block.
	ErrSize = errors.New("store: data is not one block long")
)

// maxSlots keeps every slot and the LRU sentinel (index numSlots) within
// int32 links, and NoSlot out of range.
const maxSlots = math.MaxInt32

// indexHeadroom sizes the index map; see NewOn.
const indexHeadroom = 4

// meta is a slot's bookkeeping. One slice of these (rather than one slice
// per field) keeps a slot's fields on one cache line.
type meta struct {
	key    wire.Key // valid unless Free
	pins   uint32
	state  State
	orphan bool // Ready, pinned, and no longer in the index
	summed bool // Put took the block's sums (sums.go); any other entry clears it
}

// Store is a block arena; see the package doc for the ownership contract.
type Store struct {
	arena      []byte
	blockBytes int
	meta       []meta
	lru        lru               // exactly the indexed, unpinned Ready slots
	free       []Slot            // stack of Free slots; cap numSlots, so push never allocates
	freePos    []int32           // slot -> its index in free, -1 when not Free
	index      map[wire.Key]Slot // exactly the non-orphan Ready slots
	filling    int               // slots in StateFilling
	ready      int               // slots in StateReady, orphans included
	pinned     int               // slots with pins > 0
	orphaned   int               // slots with orphan set
	evictions  uint64            // Ready slots reused by Reserve

	sumPiece int      // bytes per sum; 0: Put takes none (sums.go)
	perSlot  int      // sums per slot: ceil(blockBytes / sumPiece)
	sums     []uint32 // slot i's sums are sums[i*perSlot:][:perSlot]
}

// New allocates an arena of numSlots blocks of blockBytes each.
func New(numSlots, blockBytes int) (*Store, error) {
	if numSlots <= 0 || numSlots > maxSlots {
		return nil, fmt.Errorf("store: %d slots, want 1..%d", numSlots, maxSlots)
	}
	if blockBytes <= 0 {
		return nil, fmt.Errorf("store: block size %d, want > 0", blockBytes)
	}
	if numSlots > math.MaxInt/blockBytes {
		return nil, fmt.Errorf("store: %d slots of %d bytes overflow int", numSlots, blockBytes)
	}
	return NewOn(make([]byte, numSlots*blockBytes), blockBytes)
}

// NewOn uses arena as the store's memory, for instance shared memory the
// engine maps too. len(arena) must be a positive multiple of blockBytes.
// The store never reallocates or zeroes the arena.
func NewOn(arena []byte, blockBytes int) (*Store, error) {
	if blockBytes <= 0 {
		return nil, fmt.Errorf("store: block size %d, want > 0", blockBytes)
	}
	if len(arena) == 0 || len(arena)%blockBytes != 0 {
		return nil, fmt.Errorf("store: arena of %d bytes is not a positive multiple of block size %d", len(arena), blockBytes)
	}
	n := len(arena) / blockBytes
	if n > maxSlots {
		return nil, fmt.Errorf("store: %d slots, want at most %d", n, maxSlots)
	}
	return build(arena, n, blockBytes), nil
}

// build makes a store of n slots over arena (nil for an index-only store).
func build(arena []byte, n, blockBytes int) *Store {
	s := &Store{
		// Cap the arena so no slice derived from it can grow past its end.
		arena:      arena[:len(arena):len(arena)], // nil stays nil
		blockBytes: blockBytes,
		meta:       make([]meta, n),
		lru:        newLRU(n),
		free:       make([]Slot, n),
		freePos:    make([]int32, n),
		// The index never holds more than n keys, but a hint of n is not
		// enough for zero allocations: under churn (evict one key, insert
		// another) deletions leave tombstones, and a table sized for n
		// keeps rehashing into fresh memory (measured with Go 1.26: about
		// one allocation per 20k Reserve+Commit at n=4096). With 4x
		// headroom tombstones are reclaimed in place and churn allocates
		// nothing (TestChurnDoesNotAllocate). The cost, ~110 bytes per
		// slot, is noise beside a KV block.
		index: make(map[wire.Key]Slot, indexHeadroom*n),
	}
	// Stack order: slot 0 is handed out first, which keeps a fresh store's
	// working set at the start of the arena.
	for i := range n {
		s.free[i] = Slot(n - 1 - i)
		s.freePos[n-1-i] = int32(i)
	}
	return s
}

// BlockBytes is the size of every slot.
func (s *Store) BlockBytes() int { return s.blockBytes }

// NumSlots is the number of slots in the arena.
func (s *Store) NumSlots() int { return len(s.meta) }

// Bytes returns the slot's span of the arena, whatever its state. Its
// capacity is one block, so an append cannot spill into the next slot. Who
// may touch the bytes is the owner's decision (see the package doc). Bytes
// panics if slot is out of range.
func (s *Store) Bytes(slot Slot) []byte {
	_ = s.meta[slot] // panics with a clear index error for bad slots
	off := int(slot) * s.blockBytes
	end := off + s.blockBytes
	return s.arena[off:end:end]
}

// State returns the slot's state; orphans are StateReady. It panics if slot
// is out of range.
func (s *Store) State(slot Slot) State { return s.meta[slot].state }

// Pins returns the slot's pin count. It panics if slot is out of range.
func (s *Store) Pins(slot Slot) int { return int(s.meta[slot].pins) }

// Orphaned reports whether slot is Ready but removed from the index while
// pinned; it is freed by its last Unpin. It panics if slot is out of range.
func (s *Store) Orphaned(slot Slot) bool { return s.meta[slot].orphan }

// Key returns the key a Filling or Ready slot (orphans included) is for, and
// false for a Free slot. It panics if slot is out of range.
func (s *Store) Key(slot Slot) (wire.Key, bool) {
	m := &s.meta[slot]
	return m.key, m.state != StateFree
}

// Lookup returns the Ready slot holding key and makes it the most recently
// used. Filling slots and orphans are never found.
func (s *Store) Lookup(key wire.Key) (Slot, bool) {
	slot, ok := s.index[key]
	if !ok {
		return NoSlot, false
	}
	// A pinned slot is off the list; its last Unpin makes it most recent.
	if s.meta[slot].pins == 0 {
		s.lru.moveToFront(int32(slot))
	}
	return slot, true
}

// Contains reports whether key is Ready, without touching recency: for
// answering a peer's Lookup, which should not keep blocks alive by itself.
func (s *Store) Contains(key wire.Key) bool {
	_, ok := s.index[key]
	return ok
}

// PinKey looks key up and pins its slot in one step, as a producer does
// before serving a Fetch. The caller owes one Unpin.
func (s *Store) PinKey(key wire.Key) (Slot, bool) {
	slot, ok := s.index[key]
	if !ok || s.Pin(slot) != nil {
		return NoSlot, false
	}
	return slot, true
}

// Pin keeps a Ready slot from being evicted or freed until the matching
// Unpin. Orphans cannot be pinned: their key is gone, so a new pin could
// only be a stale slot number, and refusing it guarantees orphans drain.
func (s *Store) Pin(slot Slot) error {
	if err := s.want(slot, StateReady, "pin"); err != nil {
		return err
	}
	m := &s.meta[slot]
	switch {
	case m.orphan:
		return fmt.Errorf("%w: pin slot %d: removed from the index", ErrState, slot)
	case m.pins == math.MaxUint32:
		return fmt.Errorf("%w: pin slot %d: pin count overflow", ErrState, slot)
	case m.pins == 0:
		s.lru.remove(int32(slot))
		s.pinned++
	}
	m.pins++
	return nil
}

// Unpin releases one pin. The last one makes an indexed slot evictable again
// (as the most recently used) and frees an orphan.
func (s *Store) Unpin(slot Slot) error {
	if err := s.inRange(slot, "unpin"); err != nil {
		return err
	}
	m := &s.meta[slot]
	if m.pins == 0 {
		return fmt.Errorf("%w: unpin slot %d (%v): not pinned", ErrState, slot, m.state)
	}
	m.pins--
	if m.pins > 0 {
		return nil
	}
	s.pinned--
	if m.orphan {
		m.orphan = false
		s.orphaned--
		s.ready--
		s.release(slot)
		return nil
	}
	s.lru.pushFront(int32(slot))
	if s.arena == nil {
		// Index-only (external.go): a chunk nobody pins is the engine's
		// again, never an eviction candidate.
		s.unindex(slot)
	}
	return nil
}

// Reserve takes a slot for key and makes it Filling: a Free slot if there is
// one, else the least recently used unpinned Ready slot, which leaves the
// index. It returns ErrFull when every slot is Filling or pinned. key may
// already be Ready or Filling elsewhere; the later Commit wins.
func (s *Store) Reserve(key wire.Key) (Slot, error) {
	var slot Slot
	if n := len(s.free); n > 0 {
		slot = s.free[n-1]
		s.free = s.free[:n-1]
		s.freePos[slot] = -1
	} else {
		victim, ok := s.lru.back()
		if !ok {
			return NoSlot, ErrFull
		}
		slot = Slot(victim)
		s.lru.remove(victim)
		delete(s.index, s.meta[slot].key)
		s.ready--
		s.evictions++
	}
	s.meta[slot] = meta{key: key, state: StateFilling}
	s.filling++
	return slot, nil
}

// Commit ends a successful fill: the slot becomes Ready under its key and
// the most recently used. A previous Ready slot for the same key leaves the
// index: freed now if unpinned, else orphaned until its last Unpin.
func (s *Store) Commit(slot Slot) error {
	if err := s.want(slot, StateFilling, "commit"); err != nil {
		return err
	}
	m := &s.meta[slot]
	if old, ok := s.index[m.key]; ok {
		s.unindex(old)
	}
	m.state = StateReady
	s.filling--
	s.ready++
	s.index[m.key] = slot
	s.lru.pushFront(int32(slot))
	return nil
}

// CancelFill ends a failed fill: Filling -> Free. Call it only once the writer
// has provably stopped; until then the slot must stay Filling.
func (s *Store) CancelFill(slot Slot) error {
	if err := s.want(slot, StateFilling, "cancel fill"); err != nil {
		return err
	}
	s.filling--
	s.release(slot)
	return nil
}

// Put stores a block the engine computed: Reserve, copy, Commit. data must
// be exactly BlockBytes long. The copy happens in the owner's goroutine, so
// no fence needs to outlive the call. With SetSumPiece on, Put also takes
// the block's CRC32C sums during the copy (sums.go).
func (s *Store) Put(key wire.Key, data []byte) (Slot, error) {
	if len(data) != s.blockBytes {
		return NoSlot, fmt.Errorf("%w: %d bytes, block is %d", ErrSize, len(data), s.blockBytes)
	}
	if s.arena == nil {
		return NoSlot, ErrNoArena
	}
	slot, err := s.Reserve(key)
	if err != nil {
		return NoSlot, err
	}
	s.fill(slot, data)
	if err := s.Commit(slot); err != nil {
		panic(err) // Reserve just made it Filling
	}
	return slot, nil
}

// Remove drops a Ready key from the index; its slot is freed now if
// unpinned, else at its last Unpin. It reports whether key was Ready.
func (s *Store) Remove(key wire.Key) bool {
	slot, ok := s.index[key]
	if ok {
		s.unindex(slot)
	}
	return ok
}

// Stats counts slots by state. Free+Filling+Ready == NumSlots.
type Stats struct {
	Free      int
	Filling   int
	Ready     int    // orphans included
	Pinned    int    // Ready slots with at least one pin, orphans included
	Orphaned  int    // Ready, pinned, removed from the index
	Evictions uint64 // Ready slots Reserve has reused since New
}

// Stats returns the current counts.
func (s *Store) Stats() Stats {
	return Stats{
		Free:      len(s.free),
		Filling:   s.filling,
		Ready:     s.ready,
		Pinned:    s.pinned,
		Orphaned:  s.orphaned,
		Evictions: s.evictions,
	}
}

// unindex takes an indexed Ready slot out of the index, freeing it or, if
// readers hold pins, orphaning it.
func (s *Store) unindex(slot Slot) {
	m := &s.meta[slot]
	delete(s.index, m.key)
	if m.pins > 0 {
		m.orphan = true
		s.orphaned++
		return
	}
	s.lru.remove(int32(slot))
	s.ready--
	s.release(slot)
}

// release makes slot Free; the caller has already fixed the state counts.
func (s *Store) release(slot Slot) {
	s.meta[slot] = meta{}
	s.freePos[slot] = int32(len(s.free))
	s.free = append(s.free, slot) // within cap: at most numSlots are free
}

func (s *Store) inRange(slot Slot, op string) error {
	if int64(slot) >= int64(len(s.meta)) {
		return fmt.Errorf("%w: %s slot %d: out of range [0,%d)", ErrState, op, slot, len(s.meta))
	}
	return nil
}

func (s *Store) want(slot Slot, st State, op string) error {
	if err := s.inRange(slot, op); err != nil {
		return err
	}
	if got := s.meta[slot].state; got != st {
		return fmt.Errorf("%w: %s slot %d: is %v, want %v", ErrState, op, slot, got, st)
	}
	return nil
}
