package demo

import (
	"os"

	"github.com/kvp2p/kvp2p/internal/node"
)

// The fleet touches every page of as many slots of each store as the run
// will use before the node serves, so that the run does not pay for the
// first touch of its arenas. A fresh page costs a page fault and its
// zeroing: in this VM a block copied into fresh memory ran at 1.2 GB/s
// against 16.6 GB/s into touched memory, and the sources' puts were the
// demo's largest CPU cost (issue 14's profile). A real engine's KV cache
// is allocated and touched at start-up, so warm arenas are the honest
// setting; the nodes' own work (the data path writing a load into the
// consumer's slots) is then measured on warm memory too, as in production.
//
// It writes through Node.Slot before Serve: the node's loop is not
// running (so it records no lateness) and no slot is in use; the byte
// written is the zero the page already reads as, so nothing changes but
// residency. The store hands out Free slots from slot 0 up, so the first
// slots are the ones the run uses. A rank's share is what the run can
// write into it, capped at its slots: prefaulting touches no more memory
// than the run itself would (pod-partial at 40 requests/s: peak RSS of
// five runs in one process 7.49-7.53 GB with it, 7.42-7.51 GB without).
// That needs each run's fleet freed before the next one touches its
// arenas (issue 14: a fleet that outlived its run made five runs hit
// 20 GB).

// planPrefault sets each rank's share.
func (f *demoFleet) planPrefault() {
	w := f.sc.Workload
	total := int(w.Rate*float64(len(f.cons))*(w.Stop-w.Start).Seconds()) * w.Blocks
	for _, rk := range f.srcs {
		// Sources are picked uniformly: a quarter over the mean share is
		// three standard deviations at pod-partial's 1200 requests.
		rk.touch = min(rk.slots, 5*total/4/len(f.srcs))
	}
	for _, rk := range f.cons {
		rk.touch = max(rk.touch, min(rk.slots, total/len(f.cons)))
	}
}

// prefault touches every page of the first n slots of a node that does
// not serve yet.
func prefault(n *node.Node, slots int) {
	page := os.Getpagesize()
	for i := range slots {
		b := n.Slot(uint32(i))
		for off := 0; off < len(b); off += page {
			b[off] = 0
		}
	}
}
