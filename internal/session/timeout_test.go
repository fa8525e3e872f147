package session

import (
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/nodetest/testkeys"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// quiet is a pair whose heartbeat never fires, to isolate other timers.
func quiet(t *testing.T) *pair {
	return readyPair(t, func(c, p *Config) { c.HeartbeatTimeout, p.HeartbeatTimeout = time.Hour, time.Hour })
}

// TestLoadTimeoutPerMode: a load with no answer fails at its mode's load
// timeout (10 s symmetric, 30 s PD), not before, and sends an Abort.
func TestLoadTimeoutPerMode(t *testing.T) {
	for _, tc := range []struct {
		name string
		pd   bool
		want time.Duration
	}{{"symmetric", false, 10 * time.Second}, {"pd", true, 30 * time.Second}} {
		t.Run(tc.name, func(t *testing.T) {
			pr := quiet(t)
			ks := testkeys.Keys("a", 2)
			if !tc.pd {
				pr.p.blocks.add(ks...)
				allHit(t, pr.lookup("kv", ks))
			}
			pr.load(1, "kv", ks, tc.pd)
			pr.advance(tc.want - 10*time.Millisecond)
			pr.noLoad(1)
			if len(sentOf[*wire.Abort](pr.c)) != 0 {
				t.Fatal("abort before the load timeout")
			}
			pr.advance(10 * time.Millisecond)
			if r := pr.oneLoad(1); r.OK || r.Reason != "load timed out" {
				t.Fatalf("%+v", r)
			}
			if len(sentOf[*wire.Abort](pr.c)) != 1 {
				t.Fatal("no Abort at the load timeout")
			}
		})
	}
}

// TestStoreTimeoutReportsOnce: a PD store with no fetch fails at
// StoreTimeout, once; a fetch arriving later does not settle it again.
func TestStoreTimeoutReportsOnce(t *testing.T) {
	pr := quiet(t)
	ks := testkeys.Keys("a", 2)
	pr.p.s.AddStoredBlocks(pr.now, "kv", ks, slots(500, 2), 7)
	pr.advance(30*time.Second - 10*time.Millisecond)
	if len(pr.p.stores) != 0 {
		t.Fatal("store settled before StoreTimeout")
	}
	pr.advance(10 * time.Millisecond)
	if rs := pr.p.storeResults(7); len(rs) != 1 || rs[0].OK {
		t.Fatalf("store results %+v, want one failure", rs)
	}
	pr.load(1, "kv", ks, true)
	pr.p.s.FinishProducer(pr.now, "kv")
	pr.flush()
	pr.sendEnd(1, false, 0)
	if rs := pr.p.storeResults(7); len(rs) != 1 {
		t.Fatalf("store results %+v, want still one", rs)
	}
	if n, _ := pr.sends(1); n != 0 {
		t.Fatal("served from the slots of a timed-out store")
	}
}

// TestSessionDeathSettlesEverythingOnce: on death every load fails at once,
// exactly once; destination slots, store results and lookup pins wait for
// DataClosed; late events change nothing.
func TestSessionDeathSettlesEverythingOnce(t *testing.T) {
	pr := quiet(t)
	// Consumer side of c: a PD load in flight. Producer side of p: a PD
	// store serving it, plus a symmetric round pinned by a lookup.
	ks := testkeys.Keys("a", 2)
	pr.p.s.AddStoredBlocks(pr.now, "pd", ks[:1], slots(500, 1), 7)
	pr.load(1, "pd", ks, true)
	sym := testkeys.Keys("s", 2)
	pr.p.blocks.add(sym...)
	allHit(t, pr.lookup("sym", sym))
	pr.load(2, "sym", sym, false)
	pr.complete(2, 2)
	pr.oneLoad(2)
	pr.p.blocks.add(testkeys.Key("s", 9))
	allHit(t, pr.lookup("sym", []wire.Key{testkeys.Key("s", 9)}))

	pr.c.s.ConnFailed(pr.now)
	pr.p.s.ConnFailed(pr.now)
	pr.c.collect(t)
	pr.p.collect(t)
	if pr.c.ended != health.CauseConnReset || pr.p.ended != health.CauseConnReset {
		t.Fatalf("causes %v / %v", pr.c.ended, pr.p.ended)
	}
	if r := pr.oneLoad(1); r.OK {
		t.Fatal("load OK on a dead session")
	}
	if pr.c.released(1) != 0 || len(pr.p.stores) != 0 || pr.p.blocks.pinned() == 0 {
		t.Fatal("slots, stores or pins settled before DataClosed")
	}
	if ids := pr.c.s.FailedRequests(); len(ids) != 1 || ids[0] != "pd" {
		t.Fatalf("failed requests %v, want [pd]", ids)
	}
	// Late events of the dead session.
	pr.c.s.Receive(pr.now, &wire.TransferDone{ReqID: "pd", Job: 1, Success: true})
	pr.c.s.DataEnd(pr.now, 1, true, 2*testBlockBytes)
	pr.p.s.SendEnd(pr.now, 1, true, 0)
	pr.c.s.Tick(pr.now.Add(time.Minute))
	pr.p.s.Tick(pr.now.Add(time.Minute))
	pr.c.s.DataClosed(pr.now)
	pr.p.s.DataClosed(pr.now)
	pr.c.s.DataClosed(pr.now) // a second report is harmless
	pr.c.collect(t)
	pr.p.collect(t)
	pr.oneLoad(1)
	if pr.c.released(1) != 1 {
		t.Fatalf("released %d times, want 1", pr.c.released(1))
	}
	if rs := pr.p.storeResults(7); len(rs) != 1 || rs[0].OK {
		t.Fatalf("store %+v, want one failure", rs)
	}
	if n := pr.p.blocks.pinned(); n != 0 {
		t.Fatalf("%d pins left", n)
	}
	if len(pr.c.inbox)+len(pr.p.inbox) != 0 {
		t.Fatal("a dead session sent messages")
	}
}

// TestLoadStartBudget: a load its producer reported queued (it has the
// blocks, it sends others first) and none of whose bytes arrived within
// LoadStartBudget of that fails then (with its reason, and an Abort); the
// session stays. A load whose bytes started, and a PD load whose producer
// waits for its prefill (alive, not queued), are left alone.
func TestLoadStartBudget(t *testing.T) {
	const budget = 2 * time.Second
	pr := readyPair(t, func(c, p *Config) {
		c.HeartbeatTimeout, p.HeartbeatTimeout = time.Hour, time.Hour
		c.LoadStartBudget = budget
	})
	queued, started, prefill := testkeys.Keys("q", 2), testkeys.Keys("s", 2), testkeys.Keys("p", 2)
	pr.load(1, "q", queued, true)
	pr.load(2, "s", started, true)
	pr.load(3, "p", prefill, true)
	pr.advance(time.Second) // the prefill of job 1 takes a second: not counted
	for range 19 {
		pr.advance(100 * time.Millisecond)
		pr.c.s.DataQueued(pr.now, 1)
		pr.c.s.DataQueued(pr.now, 2) // queued, then started below
		pr.c.s.DataProgress(pr.now, 2, 4096)
		pr.c.s.DataProgress(pr.now, 3, 0) // waiting for its blocks
	}
	pr.advance(190 * time.Millisecond)
	pr.noLoad(1)
	pr.advance(10 * time.Millisecond)
	if r := pr.oneLoad(1); r.OK || r.Reason != ReasonStartBudget {
		t.Fatalf("queued load: %+v, want failed for the start budget", r)
	}
	if len(sentOf[*wire.Abort](pr.c)) != 1 {
		t.Fatal("no Abort for the load past its start budget")
	}
	pr.noLoad(2)
	pr.advance(2 * time.Second) // job 3 waited 5 s for its blocks, within the abort-ack wait of job 1
	pr.noLoad(3)
	if pr.c.s.Ended() != health.CauseNone {
		t.Fatalf("session ended (%v) for an overload", pr.c.s.Ended())
	}
}
