package node

import (
	"testing"

	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/rawbench"
)

// BenchmarkLoadTLSVsPlain alternates a PD load between two nodes with
// mutual TLS and the same load between two plain nodes, so both share the
// machine's noise, and reports TLS throughput as a fraction of plain
// (x_plain). Run with -cpuprofile to see where the TLS path spends.
func BenchmarkLoadTLSVsPlain(b *testing.B) {
	f := newTLSFleet(b)
	keys := nodetest.Keys("bench", rawbench.Blocks)
	tp, tc := benchPair(b, keys, func(id string) TLSConfig { return f.node(b, "127.0.0.1", RankURI(id)) })
	tr := &loadRig{p: tp, c: tc, keys: keys}
	pr := newLoadRig(b)
	rawbench.Interleave(b, rawbench.LoadBytes, "tls", tr.load, "plain", pr.load, "x_plain")
	tr.check(b)
}

// BenchmarkLoadTLS is the TLS half alone, for a profile of only that path.
func BenchmarkLoadTLS(b *testing.B) {
	f := newTLSFleet(b)
	keys := nodetest.Keys("bench", rawbench.Blocks)
	p, c := benchPair(b, keys, func(id string) TLSConfig { return f.node(b, "127.0.0.1", RankURI(id)) })
	r := &loadRig{p: p, c: c, keys: keys}
	r.load(b)
	b.SetBytes(rawbench.LoadBytes)
	b.ResetTimer()
	for range b.N {
		r.load(b)
	}
	b.StopTimer()
	r.check(b)
}
