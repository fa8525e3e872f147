package store

import (
	"fmt"

	"github.com/kvp2p/kvp2p/internal/crc32c"
)

// Stored checksums. Every load sends a block's bytes with their CRC32C,
// piece by piece. Summing at send time costs the producer a pass over the
// block, cold in cache, for every load of it: on the project's 2-core
// machine that was a fifth of a load's CPU and most of its gap to raw TCP.
// Put copies the block anyway, so it sums each piece while the copy has
// it in cache, once; loads of the block then send those sums.
//
// What a stored sum means: it is the block as Put stored it. Nothing in
// kvp2p writes a Ready slot, so a later change to its bytes (a stray
// write, a memory fault) no longer matches, and the consumer, which checks
// every chunk against the sum it came with, fails the load as corrupt. The
// sums thus cover the block from Put to the consumer's slot, where a sum
// taken at send time covered only the wire.
//
// Put takes sums while it copies. A load fills a slot with bytes whose
// sums came with them and were checked on arrival: the data path writes
// those into SlotSums while the slot is Filling, and MarkSummed keeps them
// when every piece arrived as exactly one chunk (the peer chunks as this
// store pieces). A slot adopted from the engine, or filled in other
// pieces, has none (Sums returns nil) and its sender sums as it sends.

// sumStep is how much of a piece Put copies before summing it: small
// enough that the copied bytes are still in L1 when the sum reads them.
const sumStep = 16 << 10

// SetSumPiece makes Put take the CRC32C of each piece of piece bytes of a
// block (the last one shorter if piece does not divide the block), to be
// read through Sums. piece 0 turns sums off, which is the default. Call
// it before the first Put: it forgets the sums taken so far. An
// index-only store has no arena and takes no sums.
func (s *Store) SetSumPiece(piece int) error {
	if piece < 0 {
		return fmt.Errorf("store: sum piece %d, want >= 0", piece)
	}
	for i := range s.meta {
		s.meta[i].summed = false
	}
	if piece == 0 || s.arena == nil {
		s.sumPiece, s.perSlot, s.sums = 0, 0, nil
		return nil
	}
	piece = min(piece, s.blockBytes)
	s.sumPiece = piece
	s.perSlot = (s.blockBytes + piece - 1) / piece
	s.sums = make([]uint32, len(s.meta)*s.perSlot)
	return nil
}

// SumPiece is the bytes per sum set by SetSumPiece (0 when off).
func (s *Store) SumPiece() int { return s.sumPiece }

// Sums returns the CRC32C of each sum piece of slot's block as Put took
// it, piece i covering Bytes(slot)[i*SumPiece():], or nil when the slot
// holds no sums (not filled by Put, or sums off). Like Bytes it is a view:
// whoever may read the slot's bytes (a pin) may read it, and it changes
// only when the slot is filled again. It panics if slot is out of range.
func (s *Store) Sums(slot Slot) []uint32 {
	if !s.meta[slot].summed {
		return nil
	}
	return s.slotSums(slot)
}

// fill copies data into slot and, with sums on, sums it piece by piece,
// each sumStep right after its copy. Its caller, Put, holds the slot
// Filling.
func (s *Store) fill(slot Slot, data []byte) {
	dst := s.Bytes(slot)
	if s.sumPiece == 0 {
		copy(dst, data)
		return
	}
	sums := s.slotSums(slot)
	for i := range sums {
		a := i * s.sumPiece
		b := min(a+s.sumPiece, len(dst))
		var sum uint32
		for x := a; x < b; x += sumStep {
			y := min(x+sumStep, b)
			copy(dst[x:y], data[x:y])
			sum = crc32c.Update(sum, dst[x:y])
		}
		sums[i] = sum
	}
	s.meta[slot].summed = true
}

// SlotSums is a slot's sum storage, for the load that fills it to record
// the CRC32C of each piece it checked (piece i at index i), or nil when
// sums are off. Like Bytes, it is a view that only the slot's filler may
// write, while the slot is Filling, and it reads nothing a fill changes
// (only what SetSumPiece set), so that filler may call it from its own
// goroutine. The sums count only after MarkSummed.
func (s *Store) SlotSums(slot Slot) []uint32 {
	if s.sumPiece == 0 {
		return nil
	}
	return s.slotSums(slot)
}

// MarkSummed makes the sums a load wrote through SlotSums the block's Sums:
// call it while the slot is still Filling, when every piece was written
// with the sum its bytes were checked against. Commit keeps them; a fill
// that fails (CancelFill) drops them with the slot. It reports false, and
// changes nothing, if the slot is not Filling or sums are off.
func (s *Store) MarkSummed(slot Slot) bool {
	if s.sumPiece == 0 || s.meta[slot].state != StateFilling {
		return false
	}
	s.meta[slot].summed = true
	return true
}

// slotSums is slot's span of the sums, with its capacity capped.
func (s *Store) slotSums(slot Slot) []uint32 {
	off := int(slot) * s.perSlot
	return s.sums[off : off+s.perSlot : off+s.perSlot]
}
