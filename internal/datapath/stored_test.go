package datapath

import (
	"bytes"
	"net"
	"testing"

	"github.com/kvp2p/kvp2p/internal/nodetest"
)

// blocksWithSums is j.blocks(0, len(j.src)) with each block's piece sums,
// as the store keeps them, taken from prod's source slots.
func (j job) blocksWithSums(prod *peer, piece int) []Block {
	blocks := j.blocks(0, len(j.src))
	for i := range blocks {
		blocks[i].Sums = nodetest.PieceSums(prod.mem.Slot(j.src[i]), piece)
	}
	return blocks
}

// TestStoredSums: a block's chunks go out with the sums it came with, when
// they are exactly its pieces. A stored sum that no longer matches the bytes
// (the slot changed after the sums were taken) fails the load at the
// consumer, for that block only; sums whose pieces are not the chunks are
// not used, and the bytes are summed as they are sent.
func TestStoredSums(t *testing.T) {
	for _, tc := range []struct {
		name  string
		piece int
		stale int // block whose slot changes after its sums were taken; -1: none
		at    int // the byte that changes
		want  bool
	}{
		{"match", 3000, -1, 0, true},
		{"stale", 3000, 2, 4500, false},
		{"stale last piece", 3000, 3, 9999, false},
		{"pieces are not chunks", 2000, 2, 4500, true},
		{"off", 0, 2, 4500, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testCfg() // 10000-byte blocks, 3000-byte chunks: the last one short
			cfg.SumPiece = tc.piece
			na, nb := net.Pipe()
			a := startPeer(t, na, cfg, 8)
			b := startPeer(t, nb, cfg, 8)
			defer a.stop(t)
			defer b.stop(t)

			j := job{id: 1, src: seq(0, 4), dst: seq(4, 4)}
			j.prepare(a, b)
			blocks := j.blocksWithSums(a, max(tc.piece, 1))
			if tc.stale >= 0 {
				a.mem.Slot(j.src[tc.stale])[tc.at] ^= 0x10
			}
			a.c.Send(j.id, blocks, true)
			if tc.want {
				// Sums not used: the consumer gets the bytes as they were
				// sent, changed or not.
				if e := b.ev.recvEnd(t, j.id); !e.OK {
					t.Fatalf("load failed: %+v", e)
				}
				if e := a.ev.sendEnd(t, j.id); !e.OK {
					t.Fatalf("producer: %+v", e)
				}
				for i := range j.src {
					if !bytes.Equal(a.mem.Slot(j.src[i]), b.mem.Slot(j.dst[i])) {
						t.Fatalf("block %d: bytes differ", i)
					}
				}
				return
			}
			e := b.ev.waitFor(t, "RecvCorrupt", func(e Event) bool { _, ok := e.(RecvCorrupt); return ok })
			if e != (RecvCorrupt{Job: 1, Block: uint32(tc.stale)}) {
				t.Fatalf("got %+v, want RecvCorrupt{1, %d}", e, tc.stale)
			}
			if e := b.ev.recvEnd(t, j.id); e.OK {
				t.Fatalf("load of a changed block reported %+v", e)
			}
		})
	}
}

// TestStoredSumsPartial: sums missing for some pieces (a short Sums) are
// summed from the slot; the rest come from Sums.
func TestStoredSumsPartial(t *testing.T) {
	cfg := testCfg()
	cfg.SumPiece = cfg.ChunkBytes
	na, nb := net.Pipe()
	a := startPeer(t, na, cfg, 4)
	b := startPeer(t, nb, cfg, 4)
	defer a.stop(t)
	defer b.stop(t)
	j := job{id: 1, src: seq(0, 2), dst: seq(2, 2)}
	j.prepare(a, b)
	blocks := j.blocksWithSums(a, cfg.SumPiece)
	for i := range blocks {
		blocks[i].Sums = blocks[i].Sums[:2]
	}
	a.c.Send(j.id, blocks, true)
	j.verify(t, a, b)
}
