package store

import (
	"bytes"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

func stdCRC(p []byte) uint32 { return crc32.Checksum(p, crc32.MakeTable(crc32.Castagnoli)) }

// TestPutSums: Put stores the bytes and each piece's CRC32C, for pieces
// that divide the block, do not, are smaller than one copy step, and
// larger than the block; slots filled any other way have none.
func TestPutSums(t *testing.T) {
	const bb = 100_000
	for _, piece := range []int{bb, 30_000, 16 << 10, 1000, 7, 2 * bb} {
		s := newStore(t, 3, bb)
		if err := s.SetSumPiece(piece); err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(uint64(piece), 2))
		for round := range 4 { // refills of the same slots replace the sums
			data := make([]byte, bb)
			for i := range data {
				data[i] = byte(rng.Uint32())
			}
			slot, err := s.Put(key(round%2), data)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(s.Bytes(slot), data) {
				t.Fatalf("piece %d: Put stored other bytes", piece)
			}
			sums, p := s.Sums(slot), s.SumPiece()
			if p != min(piece, bb) || len(sums) != (bb+p-1)/p {
				t.Fatalf("piece %d: SumPiece %d, %d sums", piece, p, len(sums))
			}
			for i, got := range sums {
				if want := stdCRC(data[i*p : min((i+1)*p, bb)]); got != want {
					t.Fatalf("piece %d: sum %d = %08x, want %08x", piece, i, got, want)
				}
			}
		}
		// Filled by a load (Reserve, Commit): no sums, also in a slot
		// that had them.
		slot, err := s.Reserve(key(9))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Commit(slot); err != nil {
			t.Fatal(err)
		}
		if s.Sums(slot) != nil {
			t.Fatalf("piece %d: a slot a load filled has sums", piece)
		}
		check(t, s)
	}
}

func TestSumsOff(t *testing.T) {
	s := newStore(t, 2, 64)
	slot := mustPut(t, s, key(1), 5)
	if s.Sums(slot) != nil || s.SumPiece() != 0 {
		t.Fatal("sums without SetSumPiece")
	}
	if err := s.SetSumPiece(16); err != nil {
		t.Fatal(err)
	}
	if s.Sums(slot) != nil {
		t.Fatal("a block Put before SetSumPiece has sums")
	}
	slot = mustPut(t, s, key(2), 5)
	if err := s.SetSumPiece(0); err != nil {
		t.Fatal(err)
	}
	if s.Sums(slot) != nil || s.SumPiece() != 0 {
		t.Fatal("sums after SetSumPiece(0)")
	}
	if err := s.SetSumPiece(-1); err == nil {
		t.Fatal("negative piece accepted")
	}
	idx, err := NewIndex(2, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := idx.SetSumPiece(16); err != nil || idx.SumPiece() != 0 {
		t.Fatalf("index-only store: %v, piece %d", err, idx.SumPiece())
	}
	if err := idx.Adopt(0, key(1)); err != nil {
		t.Fatal(err)
	}
	if idx.Sums(0) != nil {
		t.Fatal("an adopted slot has sums")
	}
}

// BenchmarkPut: the cost sums add to Put, interleaved (256 KiB blocks, a
// 64 MiB arena, so the destination is cold as in a node).
func BenchmarkPut(b *testing.B) {
	const bb, n = 256 << 10, 256
	data := block(bb, 3)
	for _, piece := range []int{0, bb} {
		name := "plain"
		if piece > 0 {
			name = "sums"
		}
		b.Run(name, func(b *testing.B) {
			s := newStore(b, n, bb)
			if err := s.SetSumPiece(piece); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(bb)
			for i := 0; b.Loop(); i++ {
				if _, err := s.Put(key(i), data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestLoadSums: a load writes its checked sums through SlotSums while the
// slot is Filling; MarkSummed makes them the block's Sums, Commit keeps
// them, CancelFill drops them with the slot. MarkSummed refuses a slot that
// is not Filling, and SlotSums is nil with sums off.
func TestLoadSums(t *testing.T) {
	s := newStore(t, 2, 100)
	if err := s.SetSumPiece(30); err != nil {
		t.Fatal(err)
	}
	slot, err := s.Reserve(key(1))
	if err != nil {
		t.Fatal(err)
	}
	sums := s.SlotSums(slot)
	if len(sums) != 4 {
		t.Fatalf("SlotSums has %d entries, want 4", len(sums))
	}
	for i := range sums {
		sums[i] = uint32(i + 1)
	}
	if s.Sums(slot) != nil {
		t.Fatal("sums count before MarkSummed")
	}
	if !s.MarkSummed(slot) {
		t.Fatal("MarkSummed refused a Filling slot")
	}
	if err := s.Commit(slot); err != nil {
		t.Fatal(err)
	}
	if got := s.Sums(slot); len(got) != 4 || got[3] != 4 {
		t.Fatalf("after Commit: Sums %v", got)
	}
	if s.MarkSummed(slot) {
		t.Fatal("MarkSummed took a Ready slot")
	}
	// A fill that fails drops its sums with the slot.
	slot2, err := s.Reserve(key(2))
	if err != nil {
		t.Fatal(err)
	}
	s.MarkSummed(slot2)
	if err := s.CancelFill(slot2); err != nil {
		t.Fatal(err)
	}
	if s.MarkSummed(slot2) {
		t.Fatal("MarkSummed took a Free slot")
	}
	slot3, err := s.Reserve(key(3))
	if err != nil {
		t.Fatal(err)
	}
	if slot3 != slot2 {
		t.Fatalf("Reserve took slot %d, want the freed slot %d", slot3, slot2)
	}
	if err := s.Commit(slot3); err != nil {
		t.Fatal(err)
	}
	if s.Sums(slot3) != nil {
		t.Fatal("a refilled slot kept a failed fill's sums")
	}
	check(t, s)

	off := newStore(t, 1, 100)
	if off.SlotSums(0) != nil {
		t.Fatal("SlotSums with sums off")
	}
}
