package session

import (
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/nodetest/testkeys"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// Round isolation: vLLM #49820 and the tests of test_issue_49820_repro.py.

func allHit(t *testing.T, vs []Verdict) {
	t.Helper()
	for i, v := range vs {
		if v != Hit {
			t.Fatalf("verdict %d = %v, want HIT (all %v)", i, v, vs)
		}
	}
}

// twoRounds: request kv looked up a (round A) and loaded it as job 1; then
// looked up b (round B). Job 1 is in flight, round B is pinned.
func twoRounds(t *testing.T) (*pair, []wire.Key, []wire.Key) {
	pr := readyPair(t, nil)
	a, b := testkeys.Keys("a", 2), testkeys.Keys("b", 2)
	pr.p.blocks.add(a...)
	pr.p.blocks.add(b...)
	allHit(t, pr.lookup("kv", a))
	pr.load(1, "kv", a, false)
	allHit(t, pr.lookup("kv", b))
	if n := pr.p.blocks.pinned(); n != 4 {
		t.Fatalf("%d pins, want 4 (two rounds)", n)
	}
	return pr, a, b
}

// TestRoundCompletionKeepsNextRoundSupply: the first round's completion
// must not destroy the next round's pinned supply; the next round's fetch
// is served after the first finalized.
func TestRoundCompletionKeepsNextRoundSupply(t *testing.T) {
	pr, _, b := twoRounds(t)
	pr.complete(1, 2)
	if r := pr.oneLoad(1); !r.OK {
		t.Fatalf("round A: %+v", r)
	}
	if n := pr.p.blocks.pinned(); n != 2 {
		t.Fatalf("%d pins after round A, want round B's 2", n)
	}
	pr.load(2, "kv", b, false)
	if n, last := pr.sends(2); n != 2 || !last {
		t.Fatalf("round B: writer got %d blocks, last=%v", n, last)
	}
	pr.complete(2, 2)
	if r := pr.oneLoad(2); !r.OK {
		t.Fatalf("round B: %+v", r)
	}
	if n := pr.p.blocks.pinned(); n != 0 {
		t.Fatalf("%d pins left", n)
	}
}

// TestConcurrentRoundsCompleteOutOfOrder: two loads of one request in
// flight; the later round completes first; each gets its own result.
func TestConcurrentRoundsCompleteOutOfOrder(t *testing.T) {
	pr, _, b := twoRounds(t)
	pr.load(2, "kv", b, false)
	pr.complete(2, 2)
	if r := pr.oneLoad(2); !r.OK {
		t.Fatalf("round B: %+v", r)
	}
	pr.noLoad(1)
	pr.complete(1, 2)
	if r := pr.oneLoad(1); !r.OK {
		t.Fatalf("round A: %+v", r)
	}
	if pr.p.blocks.pinned() != 0 || pr.c.s.Busy() || pr.p.s.Busy() {
		t.Fatal("state left after both rounds")
	}
}

// TestAbortingOneRoundPreservesTheNext: an abort of round A leaves round B
// pinned and servable.
func TestAbortingOneRoundPreservesTheNext(t *testing.T) {
	pr, _, b := twoRounds(t)
	fetchA := sentOf[*wire.Fetch](pr.c)[0]
	pr.p.s.Receive(pr.now, &wire.Abort{ReqID: "kv", Round: fetchA.Round, Job: 1})
	pr.flush()
	pr.sendEnd(1, false, 0)
	if n := pr.p.blocks.pinned(); n != 2 {
		t.Fatalf("%d pins after aborting round A, want round B's 2", n)
	}
	pr.load(2, "kv", b, false)
	pr.complete(2, 2)
	if r := pr.oneLoad(2); !r.OK {
		t.Fatalf("round B: %+v", r)
	}
}

// TestUnfetchedKeysAreRepinnedNextRound: a fetch of some hits moves the
// round's other hits to the next round, re-pinned by a lookup sent ahead
// of the fetch (issue 23: they were unpinned and forgotten before, so a
// second load job of the same request failed). They stay HIT, are never
// unpinned meanwhile, and the next round's fetch serves them.
func TestUnfetchedKeysAreRepinnedNextRound(t *testing.T) {
	pr := readyPair(t, nil)
	a := testkeys.Keys("a", 3)
	pr.p.blocks.add(a...)
	allHit(t, pr.lookup("kv", a))
	pr.load(1, "kv", a[:1], false)
	if n := pr.p.blocks.pinned(); n != 3 {
		t.Fatalf("%d pins after fetching 1 of 3, want 3 (1 in flight, 2 carried)", n)
	}
	for _, k := range a[1:] {
		if v := pr.c.s.RegisterLookup("kv", k); v != Hit {
			t.Fatalf("a hit left by the fetch reads %v, want HIT", v)
		}
	}
	ls := sentOf[*wire.Lookup](pr.c)
	fs := sentOf[*wire.Fetch](pr.c)
	if len(ls) != 2 || ls[1].Round == fs[0].Round || len(ls[1].Keys) != 2 {
		t.Fatalf("lookups %+v, fetch round %d: want a 2-key lookup in a new round", ls, fs[0].Round)
	}
	pr.load(2, "kv", a[1:], false)
	pr.complete(1, 1)
	pr.complete(2, 2)
	if !pr.oneLoad(1).OK || !pr.oneLoad(2).OK {
		t.Fatal("a job failed")
	}
	if n := pr.p.blocks.pinned(); n != 0 {
		t.Fatalf("%d pins left", n)
	}
}

// TestUnmatchedSymmetricFetchFailsAtOnce: a symmetric fetch naming a key
// its round never pinned fails on the writer's next step (no load timeout).
func TestUnmatchedSymmetricFetchFailsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		gap  time.Duration // between the lookup and the fetch
	}{
		{"pins present, one key unpinned", 0},
		{"round reaped by the store timeout", 31 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr := readyPair(t, func(c, p *Config) { c.HeartbeatTimeout, p.HeartbeatTimeout = time.Hour, time.Hour })
			a := testkeys.Keys("a", 2)
			pr.p.blocks.add(a...)
			allHit(t, pr.lookup("kv", a))
			pr.advance(tc.gap)
			r := pr.c.s.client.reqs["kv"].round
			ks := a
			if tc.gap == 0 {
				ks = append(ks[:1:1], testkeys.Key("never", 0))
			}
			pr.c.s.Receive(pr.now, &wire.Pong{})
			pr.p.s.Receive(pr.now, &wire.Fetch{ReqID: "kv", Round: r, Job: 1, Keys: ks, Slots: []uint32{1, 2}})
			pr.p.collect(t)
			if len(pr.p.dataOf(OpCancel, 1)) != 1 {
				t.Fatal("unmatched symmetric fetch not cancelled at once")
			}
			pr.p.s.SendEnd(pr.now, 1, false, 0)
			pr.p.collect(t)
			td := sentOf[*wire.TransferDone](pr.p)
			if len(td) != 1 || td[0].Success || td[0].Job != 1 {
				t.Fatalf("TransferDones %+v, want one failure", td)
			}
			if n := pr.p.blocks.pinned(); n != 0 {
				t.Fatalf("%d pins left", n)
			}
		})
	}
}

// TestPDFetchWithoutSupplyParks: a PD fetch before any store parks (decoder
// first) and is served by the stores that come later.
func TestPDFetchWithoutSupplyParks(t *testing.T) {
	pr := readyPair(t, nil)
	ks := testkeys.Keys("a", 4)
	pr.load(1, "kv", ks, true)
	if len(pr.p.dataOf(OpCancel, 1)) != 0 || len(sentOf[*wire.TransferDone](pr.p)) != 0 {
		t.Fatal("a PD fetch without supply did not park")
	}
	if n, _ := pr.sends(1); n != 0 {
		t.Fatal("sent blocks that were never stored")
	}
	pr.p.s.AddStoredBlocks(pr.now, "kv", ks[:2], slots(500, 2), 7)
	pr.p.s.AddStoredBlocks(pr.now, "kv", ks[2:], slots(502, 2), 8)
	pr.flush()
	if n, last := pr.sends(1); n != 4 || !last {
		t.Fatalf("writer got %d blocks, last=%v", n, last)
	}
	pr.complete(1, 4)
	if r := pr.oneLoad(1); !r.OK {
		t.Fatalf("%+v", r)
	}
	for _, j := range []uint64{7, 8} {
		if rs := pr.p.storeResults(j); len(rs) != 1 || !rs[0].OK {
			t.Fatalf("store %d: %+v", j, rs)
		}
	}
}

// TestTerminalFetchLeavesNoZombieRound: the empty fetch ends the request on
// the producer: no round, no request state, no pin is left behind, whether
// or not rounds were still open.
func TestTerminalFetchLeavesNoZombieRound(t *testing.T) {
	for _, tc := range []struct {
		name       string
		openLookup bool
	}{{"after the last fetch completed", false}, {"with a lookup open", true}} {
		t.Run(tc.name, func(t *testing.T) {
			pr := readyPair(t, nil)
			a := testkeys.Keys("a", 2)
			pr.p.blocks.add(a...)
			allHit(t, pr.lookup("kv", a))
			pr.load(1, "kv", a, false)
			pr.complete(1, 2)
			if tc.openLookup {
				pr.p.blocks.add(testkeys.Key("b", 0))
				allHit(t, pr.lookup("kv", []wire.Key{testkeys.Key("b", 0)}))
			}
			r := pr.c.s.client.reqs["kv"].round
			pr.p.s.Receive(pr.now, &wire.Fetch{ReqID: "kv", Round: r})
			pr.flush()
			if n := len(pr.p.s.server.reqs); n != 0 {
				t.Fatalf("producer keeps state for %d requests after the terminal fetch", n)
			}
			if n := pr.p.blocks.pinned(); n != 0 {
				t.Fatalf("%d pins left", n)
			}
			if len(sentOf[*wire.TransferDone](pr.p)) != 1 {
				t.Fatal("the terminal fetch was answered with a TransferDone")
			}
		})
	}
}

// TestSymmetricRoundsLeaveNoProducerState: a symmetric request whose last
// action was a completed fetch (so no terminal fetch is owed) leaves no
// request state on the producer, and never binds the id (binding is PD's).
func TestSymmetricRoundsLeaveNoProducerState(t *testing.T) {
	pr := readyPair(t, nil)
	a := testkeys.Keys("a", 2)
	pr.p.blocks.add(a...)
	allHit(t, pr.lookup("kv", a))
	pr.load(1, "kv", a, false)
	pr.complete(1, 2)
	pr.c.s.FinishConsumer(pr.now, "kv")
	pr.flush()
	if n := len(sentOf[*wire.Fetch](pr.c)); n != 1 {
		t.Fatalf("%d fetches, want 1 (no terminal fetch without an open lookup)", n)
	}
	if n := len(pr.p.s.server.reqs); n != 0 {
		t.Fatalf("producer keeps state for %d requests", n)
	}
	if len(pr.p.newFetch) != 0 {
		t.Fatalf("symmetric fetch reported for binding: %v", pr.p.newFetch)
	}
}

// TestDuplicateFetchForRoundIsProtocolError: a second non-empty fetch for a
// round that has demand ends the session.
func TestDuplicateFetchForRoundIsProtocolError(t *testing.T) {
	pr := readyPair(t, nil)
	pr.load(1, "kv", testkeys.Keys("a", 2), true)
	pr.p.s.Receive(pr.now, &wire.Fetch{ReqID: "kv", Round: 0, Job: 2, Keys: testkeys.Keys("a", 1), Slots: []uint32{9}})
	pr.flush()
	if pr.p.ended != health.CauseProtocolError {
		t.Fatalf("cause %v, want protocol-error", pr.p.ended)
	}
	if r := pr.oneLoad(1); r.OK {
		t.Fatal("load survived its session")
	}
}

// TestRoundNeverReusedAfterPrune pins vLLM #56471: a request id's client
// state is pruned when it finishes; a new request with the same id must get
// a round above every earlier one, so a late TransferDone or AbortAck of
// the old round can never complete the new load.
func TestRoundNeverReusedAfterPrune(t *testing.T) {
	pr := readyPair(t, nil)
	a := testkeys.Keys("a", 2)
	pr.p.blocks.add(a...)
	allHit(t, pr.lookup("kv", a))
	pr.load(1, "kv", a, false)
	old := sentOf[*wire.Fetch](pr.c)[0]
	pr.c.s.FinishConsumer(pr.now, "kv") // aborts job 1; state pruned
	pr.flush()
	if _, kept := pr.c.s.client.reqs["kv"]; kept {
		t.Fatal("client state not pruned on finish")
	}
	allHit(t, pr.lookup("kv", a))
	ls := sentOf[*wire.Lookup](pr.c)
	if nr := ls[len(ls)-1].Round; nr <= old.Round {
		t.Fatalf("round %d after prune, want above %d", nr, old.Round)
	}
	pr.load(2, "kv", a, false)
	cur := sentOf[*wire.Fetch](pr.c)
	newRound := cur[len(cur)-1].Round
	if newRound == old.Round {
		t.Fatal("round reused")
	}
	// Late messages of the old round (with either job id) change nothing.
	for _, m := range []wire.Message{
		&wire.TransferDone{ReqID: "kv", Round: old.Round, Job: 2, Success: true, Bytes: 2 * testBlockBytes},
		&wire.AbortAck{ReqID: "kv", Round: old.Round, Job: 2},
		&wire.TransferDone{ReqID: "kv", Round: old.Round, Job: 1, Success: true},
	} {
		pr.c.s.Receive(pr.now, m)
	}
	pr.c.s.DataEnd(pr.now, 2, true, 2*testBlockBytes)
	pr.c.collect(t)
	pr.noLoad(2)
	pr.sendEnd(2, true, 2*testBlockBytes)
	if r := pr.oneLoad(2); !r.OK {
		t.Fatalf("new load: %+v", r)
	}
}

// TestSecondPDLoadRefusedLocally: the consumer never sends a second fetch
// for a PD request's only round while the first is in flight (the producer
// would end the whole session for it); the first load is unaffected.
func TestSecondPDLoadRefusedLocally(t *testing.T) {
	pr := readyPair(t, nil)
	ks := testkeys.Keys("a", 2)
	pr.load(1, "kv", ks, true)
	if err := pr.c.s.RequestBlocks(pr.now, 2, "kv", ks, slots(900, 2), true); err == nil {
		t.Fatal("second PD load of the same request accepted")
	}
	pr.flush()
	if pr.p.ended != health.CauseNone {
		t.Fatalf("producer ended: %v", pr.p.ended)
	}
	pr.p.s.AddStoredBlocks(pr.now, "kv", ks, slots(500, 2), 7)
	pr.flush()
	pr.complete(1, 2)
	if r := pr.oneLoad(1); !r.OK {
		t.Fatalf("%+v", r)
	}
}
