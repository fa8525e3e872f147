package node

import (
	"testing"

	"github.com/kvp2p/kvp2p/internal/rawbench"
)

// newRelayRig is a load rig whose producer serves blocks it loaded itself
// (a first hop, untimed), not blocks Put gave it: the second hop of a
// prefix that travels on. Such blocks keep the sums their chunks were
// checked against (store.MarkSummed), so the relay sends those instead of
// summing the block as it sends it.
func newRelayRig(b *testing.B) *loadRig {
	first := newLoadRig(b)
	first.load(b) // the relay (first.c) now holds every block, loaded
	mut := func(cfg *Config) {
		cfg.BlockBytes, cfg.Slots = rawbench.BlockBytes, max(len(first.keys), 16)
		cfg.Log = nil
	}
	d := startTN(b, nodeOpt{mut: mut})
	warmPD(b, d, first.c, first.keys[0])
	return &loadRig{p: first.c, c: d, keys: first.keys}
}

// BenchmarkRelayVsRaw is BenchmarkLoadVsRaw with the producer serving
// blocks a load filled (newRelayRig).
func BenchmarkRelayVsRaw(b *testing.B) {
	lr, rr := newRelayRig(b), rawbench.NewRaw(b, rawbench.LoadBytes, rawbench.BlockBytes)
	rawbench.Interleave(b, rawbench.LoadBytes, "kvp2p", lr.load, "raw", rr.Copy, "x_raw")
	lr.check(b)
}
