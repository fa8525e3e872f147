package summary

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/wire"
)

// benchIndex is an index of 999 peers whose tiers of chunks chunks are full
// of random keys; peer 0 also holds hot's first 200 keys.
func benchIndex(b *testing.B, chunks int, hot []wire.Key) *Index {
	b.Helper()
	x := NewIndex(0)
	r := rand.New(rand.NewPCG(1, 1))
	for i := range 999 {
		p, _ := NewProducer(chunks, uint64(i))
		c := 0
		if i == 0 {
			for _, k := range hot[:200] {
				_ = p.Store(c, k)
				c++
			}
		}
		for ; c < chunks; c++ {
			_ = p.Store(c, testKey(r))
		}
		p.Flush()
		for _, part := range p.Snapshot() {
			if err := x.Apply(fmt.Sprintf("peer-%d", i), &part, time.Time{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	return x
}

// BenchmarkFind: one Find over 999 peers with full tiers of 8,192 chunks:
// a request of 500 blocks nobody holds (what a request pays when no peer
// can serve it), and one whose first 200 blocks one peer holds.
func BenchmarkFind(b *testing.B) {
	keys := chain(77, 500)
	x := benchIndex(b, 8192, keys)
	cold := chain(78, 500)
	for _, bc := range []struct {
		name string
		keys []wire.Key
		want int
	}{{"nobody", cold, 0}, {"one-holder", keys, 200}} {
		b.Run(bc.name, func(b *testing.B) {
			q := Query{Keys: bc.keys}
			for b.Loop() {
				c, _ := x.Find(q)
				if c.Blocks != bc.want {
					b.Fatalf("found %+v, want %d blocks", c, bc.want)
				}
			}
		})
	}
}
