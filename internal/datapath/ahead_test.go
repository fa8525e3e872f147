package datapath

import (
	"slices"
	"testing"
)

// TestReadAheadLoads: over TCP with chunks large enough for readv, jobs
// whose blocks come in order, out of order, or interleaved with another
// job's arrive intact with no byte outside their slots. Whether a read
// goes ahead depends on timing (a reader that keeps up with the writer
// never finds the next header in the socket): the hits and misses are
// logged, and wire's TestReadAhead checks both outcomes with scripted
// reads.
func TestReadAheadLoads(t *testing.T) {
	cfg := Config{BlockBytes: 256 << 10, ChunkBytes: 64 << 10}
	cases := []struct {
		name  string
		jobs  []job
		order func([]Block) []Block
	}{
		{"in order", []job{{id: 1, src: seq(0, 12), dst: seq(20, 12)}}, func(b []Block) []Block { return b }},
		{"reversed", []job{{id: 1, src: seq(0, 12), dst: seq(20, 12)}}, func(b []Block) []Block { slices.Reverse(b); return b }},
		{"two jobs", []job{{id: 1, src: seq(0, 8), dst: seq(20, 8)}, {id: 2, src: seq(8, 8), dst: seq(30, 8)}}, func(b []Block) []Block { return b }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			na, nb := tcpPair(t)
			prod := startPeer(t, na, cfg, 40)
			cons := startPeer(t, nb, cfg, 40)
			for _, j := range tc.jobs {
				j.prepare(prod, cons)
			}
			for _, j := range tc.jobs {
				prod.c.Send(j.id, tc.order(j.blocks(0, len(j.src))), true)
			}
			for _, j := range tc.jobs {
				j.verify(t, prod, cons)
			}
			prod.stop(t)
			cons.stop(t) // the reader has returned: its Reader is ours to read
			hits, misses := cons.c.r.rd.AheadStats()
			t.Logf("%d reads ahead landed, %d taken back", hits, misses)
		})
	}
}
