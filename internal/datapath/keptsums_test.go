package datapath

import (
	"net"
	"slices"
	"testing"

	"github.com/kvp2p/kvp2p/internal/nodetest"
)

// sumArena is a test arena that keeps each slot's sums, as the node's
// store does (store.SlotSums).
type sumArena struct {
	*arena
	sums [][]uint32
}

func (a *sumArena) SlotSums(i uint32) []uint32 {
	if int(i) >= len(a.sums) {
		return nil
	}
	return a.sums[i]
}

// startSumPeer is startPeer on a sumArena with sums of cfg.SumPiece.
func startSumPeer(t *testing.T, nc net.Conn, cfg Config, slots int) (*peer, *sumArena) {
	t.Helper()
	var sa *sumArena
	p := startPeerOn(t, nc, cfg, slots, func(a *arena) Memory {
		sa = &sumArena{arena: a}
		for range slots {
			sa.sums = append(sa.sums, make([]uint32, cfg.pieces()))
		}
		return sa
	})
	return p, sa
}

// TestLoadKeepsSums: on a SumMemory, a load whose chunks are exactly the
// consumer's sum pieces writes each chunk's checked CRC32C into its slot's
// sums, and RecvEnd says so (Summed, with the job's slots); the node then
// keeps them as the block's stored sums. Chunks that are not the pieces, a
// chunk that fails its check, or a Memory without sums: not Summed.
func TestLoadKeepsSums(t *testing.T) {
	for _, tc := range []struct {
		name    string
		piece   int  // the consumer's sum piece
		corrupt int  // block whose stored sum the producer sends wrong; -1: none
		plain   bool // the consumer's memory keeps no sums
		want    bool
	}{
		{"pieces are chunks", 3000, -1, false, true},
		{"pieces are not chunks", 2000, -1, false, false},
		{"corrupt chunk", 3000, 1, false, false},
		{"no sum memory", 3000, -1, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pcfg := testCfg() // 10000-byte blocks, 3000-byte chunks: the last one short
			pcfg.SumPiece = pcfg.ChunkBytes
			ccfg := testCfg()
			ccfg.SumPiece = tc.piece
			na, nb := net.Pipe()
			a := startPeer(t, na, pcfg, 8)
			var b *peer
			var sa *sumArena
			if tc.plain {
				b = startPeer(t, nb, ccfg, 8)
			} else {
				b, sa = startSumPeer(t, nb, ccfg, 8)
			}
			defer a.stop(t)
			defer b.stop(t)

			j := job{id: 1, src: seq(0, 4), dst: seq(4, 4)}
			j.prepare(a, b)
			blocks := j.blocksWithSums(a, pcfg.SumPiece)
			if tc.corrupt >= 0 {
				blocks[tc.corrupt].Sums[2] ^= 1
			}
			a.c.Send(j.id, blocks, true)
			e := b.ev.recvEnd(t, j.id)
			if e.OK != (tc.corrupt < 0) {
				t.Fatalf("RecvEnd %+v, want OK %v", e, tc.corrupt < 0)
			}
			if e.Summed != tc.want {
				t.Fatalf("RecvEnd.Summed = %v, want %v", e.Summed, tc.want)
			}
			if !slices.Equal(e.Slots, j.dst) {
				t.Fatalf("RecvEnd.Slots = %v, want %v", e.Slots, j.dst)
			}
			if !tc.want {
				return
			}
			for _, s := range j.dst {
				if want := nodetest.PieceSums(b.mem.Slot(s), tc.piece); !slices.Equal(sa.SlotSums(s), want) {
					t.Fatalf("slot %d sums %x, want the CRC32C of its pieces %x", s, sa.SlotSums(s), want)
				}
			}
		})
	}
}
