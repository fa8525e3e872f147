package session

import (
	"testing"

	"github.com/kvp2p/kvp2p/internal/nodetest/testkeys"
	"github.com/kvp2p/kvp2p/internal/wire"
)

func terminalFetches(sd *side, id string) int {
	n := 0
	for _, f := range sentOf[*wire.Fetch](sd) {
		if f.ReqID == id && len(f.Keys) == 0 {
			n++
		}
	}
	return n
}

// TestConsumerFinish: finishing a consumer request aborts its loads in
// flight (failure published now, slots later) and sends the terminal empty
// fetch exactly when a lookup is open, also with a load in flight; then
// the producer holds no pin and no state for it.
func TestConsumerFinish(t *testing.T) {
	for _, tc := range []struct {
		name       string
		load       bool
		openLookup bool
	}{
		{"load in flight, no lookup open", true, false},
		{"lookup open, nothing in flight", false, true},
		{"load in flight and the next round's lookup open", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr := readyPair(t, nil)
			a, b := testkeys.Keys("a", 2), testkeys.Keys("b", 2)
			pr.p.blocks.add(a...)
			pr.p.blocks.add(b...)
			if tc.load {
				allHit(t, pr.lookup("kv", a))
				pr.load(1, "kv", a, false)
			}
			if tc.openLookup {
				allHit(t, pr.lookup("kv", b))
			}
			pr.c.s.FinishConsumer(pr.now, "kv")
			pr.flush()
			want := 0
			if tc.openLookup {
				want = 1
			}
			if n := terminalFetches(pr.c, "kv"); n != want {
				t.Fatalf("%d terminal fetches, want %d", n, want)
			}
			if tc.load {
				if r := pr.oneLoad(1); r.OK {
					t.Fatal("finished request's load reported OK")
				}
				if len(sentOf[*wire.Abort](pr.c)) != 1 {
					t.Fatal("no Abort for the load in flight")
				}
				pr.sendEnd(1, false, 0)
				pr.dataEnd(1, false, 0)
				if pr.c.released(1) != 1 {
					t.Fatal("slots not released after AbortAck and the reader's end")
				}
				pr.oneLoad(1)
			}
			if n := pr.p.blocks.pinned(); n != 0 {
				t.Fatalf("producer still pins %d blocks", n)
			}
			if len(pr.p.s.server.reqs) != 0 || pr.p.s.Busy() || pr.c.s.Busy() {
				t.Fatal("state left after the finish settled")
			}
		})
	}
}

// TestConsumerFinishTwice: a repeated finish sends nothing more and
// publishes no second result (#52571).
func TestConsumerFinishTwice(t *testing.T) {
	pr := readyPair(t, nil)
	pr.load(1, "kv", testkeys.Keys("a", 1), true)
	pr.c.s.FinishConsumer(pr.now, "kv")
	pr.flush()
	n := len(pr.c.sent)
	pr.c.s.FinishConsumer(pr.now, "kv")
	pr.flush()
	if len(pr.c.sent) != n {
		t.Fatalf("second finish sent %v", pr.c.sent[n:])
	}
	pr.oneLoad(1)
}

// TestProducerFinish is TestFinishRequestServerSide: a PD producer's
// request ends locally (no more stores will come).
func TestProducerFinish(t *testing.T) {
	ks := testkeys.Keys("a", 4)
	t.Run("demand with nothing in flight fails early", func(t *testing.T) {
		pr := readyPair(t, nil)
		pr.load(1, "kv", ks, true) // decoder first: parked
		pr.p.s.FinishProducer(pr.now, "kv")
		pr.flush()
		if len(pr.p.dataOf(OpCancel, 1)) != 1 {
			t.Fatal("parked demand not cancelled on finish")
		}
		pr.sendEnd(1, false, 0)
		if td := sentOf[*wire.TransferDone](pr.p); len(td) != 1 || td[0].Success {
			t.Fatalf("TransferDones %+v, want one failure", td)
		}
		pr.dataEnd(1, false, 0)
		if r := pr.oneLoad(1); r.OK {
			t.Fatal("load OK without supply")
		}
		if pr.c.released(1) != 1 || len(pr.p.s.server.reqs) != 0 {
			t.Fatal("state left")
		}
	})
	t.Run("transfer in flight: the end is deferred to the writer", func(t *testing.T) {
		pr := readyPair(t, nil)
		pr.p.s.AddStoredBlocks(pr.now, "kv", ks[:2], slots(500, 2), 7)
		pr.load(1, "kv", ks, true)
		pr.p.s.FinishProducer(pr.now, "kv")
		pr.flush()
		if len(sentOf[*wire.TransferDone](pr.p)) != 0 || len(pr.p.stores) != 0 {
			t.Fatal("round ended while its writer still reads the slots")
		}
		pr.sendEnd(1, false, 2*testBlockBytes)
		if td := sentOf[*wire.TransferDone](pr.p); len(td) != 1 || td[0].Success {
			t.Fatalf("TransferDones %+v, want one failure", td)
		}
		if rs := pr.p.storeResults(7); len(rs) != 1 || rs[0].OK {
			t.Fatalf("store %+v, want one failure (demand not met)", rs)
		}
	})
	t.Run("full demand still succeeds", func(t *testing.T) {
		pr := readyPair(t, nil)
		pr.p.s.AddStoredBlocks(pr.now, "kv", ks, slots(500, 4), 7)
		pr.load(1, "kv", ks, true)
		pr.p.s.FinishProducer(pr.now, "kv")
		pr.flush()
		if len(pr.p.dataOf(OpCancel, 1)) != 0 {
			t.Fatal("a fully supplied round was cancelled")
		}
		pr.complete(1, 4)
		if r := pr.oneLoad(1); !r.OK {
			t.Fatalf("%+v", r)
		}
		if rs := pr.p.storeResults(7); len(rs) != 1 || !rs[0].OK {
			t.Fatalf("store %+v", rs)
		}
		if len(pr.p.s.server.reqs) != 0 {
			t.Fatal("state left")
		}
	})
	t.Run("prefiller first: finish before the fetch still serves", func(t *testing.T) {
		pr := readyPair(t, nil)
		pr.p.s.AddStoredBlocks(pr.now, "kv", ks, slots(500, 4), 7)
		pr.p.s.FinishProducer(pr.now, "kv")
		pr.flush()
		if len(pr.p.stores) != 0 {
			t.Fatal("store settled before its fetch")
		}
		pr.load(1, "kv", ks, true)
		pr.complete(1, 4)
		if r := pr.oneLoad(1); !r.OK {
			t.Fatalf("%+v", r)
		}
		if rs := pr.p.storeResults(7); len(rs) != 1 || !rs[0].OK {
			t.Fatalf("store %+v", rs)
		}
	})
	t.Run("prefiller first, partial supply: fails at the fetch", func(t *testing.T) {
		pr := readyPair(t, nil)
		pr.p.s.AddStoredBlocks(pr.now, "kv", ks[:2], slots(500, 2), 7)
		pr.p.s.FinishProducer(pr.now, "kv")
		pr.load(1, "kv", ks, true)
		if len(pr.p.dataOf(OpCancel, 1)) != 1 {
			t.Fatal("unmeetable demand of a finished request not cancelled")
		}
		pr.sendEnd(1, false, 2*testBlockBytes)
		if rs := pr.p.storeResults(7); len(rs) != 1 || rs[0].OK {
			t.Fatalf("store %+v", rs)
		}
	})
}
