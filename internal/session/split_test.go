package session

import (
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest/testkeys"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// Issue 23 (split loads): vLLM may group one request's confirmed hits into
// load jobs any way it likes: one job, several in one step (a lookup pass
// saw some HIT and some RETRY), jobs in later steps, in any order. Every
// grouping must load, with every pin released at the end.

// grouping is a split of a request's 13 hits into jobs: each job names the
// key indexes it loads; sameStep jobs are submitted back to back (no
// answer from the producer in between), the others after the previous
// jobs completed and some time passed.
type grouping struct {
	name     string
	jobs     [][]int
	sameStep bool
}

func span(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

func splitGroupings() []grouping {
	return []grouping{
		{"one job", [][]int{span(0, 13)}, true},
		{"7+6 same step", [][]int{span(0, 7), span(7, 13)}, true},
		{"7+6 later step", [][]int{span(0, 7), span(7, 13)}, false},
		{"12+1 same step", [][]int{span(0, 12), span(12, 13)}, true},
		{"12+1 later step", [][]int{span(0, 12), span(12, 13)}, false},
		{"tail first (6+7)", [][]int{span(7, 13), span(0, 7)}, false},
		{"1+12 same step", [][]int{span(12, 13), span(0, 12)}, true},
		{"4+4+5 same step", [][]int{span(0, 4), span(4, 8), span(8, 13)}, true},
		{"4+4+5 later steps", [][]int{span(0, 4), span(4, 8), span(8, 13)}, false},
		{"one block a job", [][]int{{3}, {0}, {12}, {1}, {2}, span(4, 12)}, false},
		{"interleaved", [][]int{{0, 2, 4, 6, 8, 10, 12}, {1, 3, 5, 7, 9, 11}}, true},
	}
}

func pick(ks []wire.Key, idx []int) []wire.Key {
	out := make([]wire.Key, len(idx))
	for i, j := range idx {
		out[i] = ks[j]
	}
	return out
}

func TestSplitLoadsOfConfirmedHits(t *testing.T) {
	for _, g := range splitGroupings() {
		t.Run(g.name, func(t *testing.T) {
			pr := readyPair(t, func(c, p *Config) { c.HeartbeatTimeout, p.HeartbeatTimeout = time.Hour, time.Hour })
			ks := testkeys.Keys("p", 13)
			pr.p.blocks.add(ks...)
			allHit(t, pr.lookup("kv", ks))
			run := func(job uint64, n int) {
				pr.complete(job, n)
				if r := pr.oneLoad(job); !r.OK {
					t.Fatalf("job %d of %v: %+v", job, g.jobs, r)
				}
			}
			for i, idx := range g.jobs {
				job := uint64(i + 1)
				// Every key vLLM was told is a HIT still reads HIT.
				for _, k := range pick(ks, idx) {
					if v := pr.c.s.RegisterLookup("kv", k); v != Hit {
						t.Errorf("job %d: key reads %v before its load, want HIT", job, v)
					}
				}
				if err := pr.c.s.RequestBlocks(pr.now, job, "kv", pick(ks, idx), slots(int(job)*100, len(idx)), false); err != nil {
					t.Fatalf("job %d (%d keys) refused: %v", job, len(idx), err)
				}
				if !g.sameStep {
					pr.flush()
					run(job, len(idx))
					pr.advance(200 * time.Millisecond)
				}
			}
			if g.sameStep {
				pr.flush()
				for i, idx := range g.jobs {
					run(uint64(i+1), len(idx))
				}
			}
			// Each key was sent exactly once, by the job that named it.
			for i, idx := range g.jobs {
				if n, last := pr.sends(uint64(i + 1)); n != len(idx) || !last {
					t.Fatalf("job %d: writer got %d blocks (last=%v), want %d", i+1, n, last, len(idx))
				}
			}
			pr.c.s.FinishConsumer(pr.now, "kv")
			pr.flush()
			if n := pr.p.blocks.pinned(); n != 0 {
				t.Fatalf("%d pins left after the request ended", n)
			}
			if pr.c.s.Busy() || pr.p.s.Busy() || len(pr.p.s.server.reqs) != 0 || len(pr.c.s.client.reqs) != 0 {
				t.Fatalf("state left: busy %v/%v, producer reqs %d, consumer reqs %d",
					pr.c.s.Busy(), pr.p.s.Busy(), len(pr.p.s.server.reqs), len(pr.c.s.client.reqs))
			}
		})
	}
}

// TestSplitLoadHitsStayPinned: between two jobs the hits the first left
// behind are never unpinned on the producer (an eviction there would turn
// a confirmed hit into a failed load).
func TestSplitLoadHitsStayPinned(t *testing.T) {
	pr := readyPair(t, nil)
	ks := testkeys.Keys("p", 13)
	pr.p.blocks.add(ks...)
	allHit(t, pr.lookup("kv", ks))
	pr.load(1, "kv", ks[:7], false)
	for _, k := range ks {
		if pr.p.blocks.pins[pr.p.blocks.held[k]] == 0 {
			t.Fatalf("key %x unpinned after job 1's fetch", k[:4])
		}
	}
	pr.complete(1, 7)
	for _, k := range ks[7:] {
		if pr.p.blocks.pins[pr.p.blocks.held[k]] != 1 {
			t.Fatalf("key %x: %d pins after job 1, want 1", k[:4], pr.p.blocks.pins[pr.p.blocks.held[k]])
		}
	}
	if n := pr.p.blocks.pinned(); n != 6 {
		t.Fatalf("%d pins after job 1, want the 6 left behind", n)
	}
}

// TestSplitLoadLeftoversReleased: hits no job loads are released by every
// way a request ends: its finish (terminal fetch), the producer's lookup
// pin timeout if the consumer goes quiet, and the session's end.
func TestSplitLoadLeftoversReleased(t *testing.T) {
	for _, end := range []string{"finish", "pin timeout", "session end"} {
		t.Run(end, func(t *testing.T) {
			pr := readyPair(t, func(c, p *Config) {
				c.HeartbeatTimeout, p.HeartbeatTimeout = time.Hour, time.Hour
				c.HeartbeatInterval, p.HeartbeatInterval = time.Hour, time.Hour
				p.LookupPinTimeout = 3 * time.Second
			})
			ks := testkeys.Keys("p", 5)
			pr.p.blocks.add(ks...)
			allHit(t, pr.lookup("kv", ks))
			pr.load(1, "kv", ks[:2], false)
			pr.complete(1, 2)
			if n := pr.p.blocks.pinned(); n != 3 {
				t.Fatalf("%d pins, want 3 left behind", n)
			}
			switch end {
			case "finish":
				pr.c.s.FinishConsumer(pr.now, "kv")
				pr.flush()
			case "pin timeout":
				pr.advance(2900 * time.Millisecond)
				if n := pr.p.blocks.pinned(); n != 3 {
					t.Fatalf("%d pins before LookupPinTimeout, want 3", n)
				}
				pr.advance(100 * time.Millisecond)
			case "session end":
				pr.c.s.ConnFailed(pr.now)
				pr.p.s.ConnFailed(pr.now)
				pr.p.s.DataClosed(pr.now)
				pr.c.s.DataClosed(pr.now)
				pr.flush()
			}
			if n := pr.p.blocks.pinned(); n != 0 {
				t.Fatalf("%d pins left", n)
			}
		})
	}
}

// TestSplitLoadRefusedRepinFallsBack: a producer over its lookup quota
// answers the carrying lookup MISS. A job naming those keys in the same
// step (sent before the answer) finds no supply and fails cleanly; one in
// a later step is refused locally (the keys read MISS). No pin leaks, the
// session lives, job 1 loads.
func TestSplitLoadRefusedRepinFallsBack(t *testing.T) {
	pr := readyPair(t, func(c, p *Config) { p.LookupKeysPerSecond = 8 })
	ks := testkeys.Keys("p", 8)
	pr.p.blocks.add(ks...)
	allHit(t, pr.lookup("kv", ks)) // spends the producer's budget
	if err := pr.c.s.RequestBlocks(pr.now, 1, "kv", ks[:4], slots(100, 4), false); err != nil {
		t.Fatal(err)
	}
	if err := pr.c.s.RequestBlocks(pr.now, 2, "kv", ks[4:6], slots(200, 2), false); err != nil {
		t.Fatalf("job 2 in the same step refused: %v", err)
	}
	pr.flush()
	if ops := pr.p.dataOf(OpCancel, 2); len(ops) != 1 {
		t.Fatalf("job 2 without supply: %d cancels, want 1", len(ops))
	}
	pr.sendEnd(2, false, 0)
	pr.dataEnd(2, false, 0)
	if r := pr.oneLoad(2); r.OK {
		t.Fatalf("job 2 loaded keys the producer did not re-pin: %+v", r)
	}
	if err := pr.c.s.RequestBlocks(pr.now, 3, "kv", ks[6:], slots(300, 2), false); err == nil {
		t.Fatal("job 3 of keys the producer refused to re-pin was accepted")
	}
	for _, k := range ks[6:] {
		if v := pr.c.s.RegisterLookup("kv", k); v != Miss {
			t.Fatalf("refused re-pin reads %v, want MISS", v)
		}
	}
	pr.complete(1, 4)
	if r := pr.oneLoad(1); !r.OK {
		t.Fatalf("job 1: %+v", r)
	}
	pr.c.s.FinishConsumer(pr.now, "kv")
	pr.flush()
	if n := pr.p.blocks.pinned(); n != 0 || pr.c.ended != 0 || pr.p.ended != 0 {
		t.Fatalf("%d pins left, session ends %v/%v", n, pr.c.ended, pr.p.ended)
	}
}

// TestSplitLoadCarryLookupLost: the carrying lookup never reaches the
// producer (a peer that drops lookups), so the hits left behind are
// unpinned by job 1's fetch. The lookup deadline leaves them reading HIT
// (vLLM is not waiting on them); job 2 then finds no supply and fails
// cleanly, at once: no hang, no pin left, the session lives.
func TestSplitLoadCarryLookupLost(t *testing.T) {
	pr := readyPair(t, func(c, p *Config) {
		c.HeartbeatTimeout, p.HeartbeatTimeout = time.Hour, time.Hour
		c.HeartbeatInterval, p.HeartbeatInterval = time.Hour, time.Hour
	})
	ks := testkeys.Keys("p", 6)
	pr.p.blocks.add(ks...)
	allHit(t, pr.lookup("kv", ks))
	if err := pr.c.s.RequestBlocks(pr.now, 1, "kv", ks[:3], slots(100, 3), false); err != nil {
		t.Fatal(err)
	}
	pr.c.collect(t)
	kept := pr.c.inbox[:0]
	for _, m := range pr.c.inbox {
		if _, isLookup := m.(*wire.Lookup); !isLookup {
			kept = append(kept, m)
		}
	}
	if len(kept) != len(pr.c.inbox)-1 {
		t.Fatalf("job 1 sent %d messages, want its fetch and one carrying lookup", len(pr.c.inbox))
	}
	pr.c.inbox = kept
	pr.flush()
	pr.complete(1, 3)
	if !pr.oneLoad(1).OK {
		t.Fatal("job 1 failed")
	}
	if n := pr.p.blocks.pinned(); n != 0 {
		t.Fatalf("%d pins: the dropped lookup pinned nothing", n)
	}
	pr.advance(3 * time.Second) // past LookupTimeout (2 s)
	for _, k := range ks[3:] {
		if v := pr.c.s.RegisterLookup("kv", k); v != Hit {
			t.Fatalf("carried key after the lookup deadline reads %v, want HIT", v)
		}
	}
	pr.load(2, "kv", ks[3:], false)
	if ops := pr.p.dataOf(OpCancel, 2); len(ops) != 1 {
		t.Fatalf("job 2 without supply: %d cancels, want 1", len(ops))
	}
	pr.sendEnd(2, false, 0)
	pr.dataEnd(2, false, 0)
	if r := pr.oneLoad(2); r.OK {
		t.Fatalf("job 2 loaded unpinned blocks: %+v", r)
	}
	pr.c.s.FinishConsumer(pr.now, "kv")
	pr.flush()
	if n := pr.p.blocks.pinned(); n != 0 || pr.c.ended != 0 || pr.p.ended != 0 {
		t.Fatalf("%d pins left, session ends %v/%v", n, pr.c.ended, pr.p.ended)
	}
}
