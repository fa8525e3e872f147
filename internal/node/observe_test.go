package node

import (
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/datapath"
	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/store"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// The observer on its own: a scripted sequence of actions and events, on
// a fake clock.

func TestObserverTransfer(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	o := newObserver(t0)
	const conn, job = loads.ConnID(3), uint64(7)
	o.action(at(0), loads.Action{Kind: loads.ActSend, Conn: conn, Msg: &wire.Fetch{ReqID: "r", Job: job}}, false)
	o.action(at(0), loads.Action{Kind: loads.ActData, Conn: conn, Op: session.DataOp{Kind: session.OpExpect, Job: job, Slots: make([]store.Slot, 4)}}, false)
	o.data(at(20), conn, datapath.RecvProgress{Job: job, Bytes: 100})
	o.data(at(30), conn, datapath.RecvProgress{Job: job, Bytes: 100}) // a Progress frame: no new bytes
	o.data(at(50), conn, datapath.RecvEnd{Job: job, OK: true, Bytes: 400})
	if o.c.BytesIn != 400 || o.conns[conn].bytesIn != 400 || !o.conns[conn].lastProgress.Equal(at(50)) {
		t.Fatalf("bytes %d / %d, last progress %v", o.c.BytesIn, o.conns[conn].bytesIn, o.conns[conn].lastProgress)
	}
	if o.h.FetchRTT.Count != 1 || o.h.FetchRTT.Sum != 0.02 {
		t.Errorf("fetch rtt: %+v, want one of 20ms", o.h.FetchRTT)
	}
	if o.h.TransferTime.Count != 1 || o.h.TransferTime.Sum != 0.05 || o.h.TransferBlocks.Sum != 4 {
		t.Errorf("transfer: %+v, blocks %+v", o.h.TransferTime, o.h.TransferBlocks)
	}
	if _, held := o.jobs[job]; !held {
		t.Fatal("a received job was forgotten before its result")
	}
	o.JobSettled(loads.JobResult{Job: job, Kind: loads.JobLoad, OK: true, Bytes: 400}, t0.Add(-10*time.Millisecond))
	if _, held := o.jobs[job]; held || o.c.LoadsOK != 1 || o.h.TimeToHit.Count != 1 || o.h.PostTime.Sum != 0.01 {
		t.Fatalf("after the result: held %v, ok %d, tth %+v, post %+v", held, o.c.LoadsOK, o.h.TimeToHit, o.h.PostTime)
	}
}

func TestObserverEndsAndFallbacks(t *testing.T) {
	now := time.Unix(1000, 0)
	o := newObserver(now)
	closeWith := func(c health.Cause, byPolicy bool) {
		o.action(now, loads.Action{Kind: loads.ActClose, Conn: 1, Cause: c}, byPolicy)
	}
	closeWith(health.CauseProgressStall, false) // the watchdog
	closeWith(health.CauseProgressStall, true)  // an unanswered probe
	closeWith(health.CauseGoodbye, false)
	if o.c.StallsDetected != 1 || o.c.PeerDisconnects != 2 || o.c.SessionEnds["progress-stall"] != 2 || o.c.SessionEnds["goodbye"] != 1 {
		t.Fatalf("counters %+v", o.c)
	}
	o.JobSettled(loads.JobResult{Job: 1, Kind: loads.JobLoad, Bytes: 64, Reason: "load timed out"}, time.Time{})
	o.JobSettled(loads.JobResult{Job: 2, Kind: loads.JobStore, Reason: loads.ReasonUnboundTimeout}, time.Time{})
	o.JobSettled(loads.JobResult{Job: 3, Kind: loads.JobLoad, Reason: session.ReasonStartBudget}, time.Time{})
	o.LookupFellBack("r", 300*time.Millisecond)
	c := o.c
	if c.LoadsOverBudget != 1 || c.LoadTimeouts != 1 {
		t.Fatalf("over budget %d, timeouts %d", c.LoadsOverBudget, c.LoadTimeouts)
	}
	if c.LoadFailures != 2 || c.LoadTimeouts != 1 || c.FailedLoadBytes != 64 || c.StoreFailures != 1 ||
		c.UnboundStoreTimeouts != 1 || c.LookupFallbacks != 1 || o.h.Fallbacks().Count != 3 {
		t.Fatalf("counters %+v", c)
	}
}

func TestObserverLookupsBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	o := newObserver(now)
	for i := range maxTimed + 10 {
		o.action(now, loads.Action{Kind: loads.ActSend, Conn: 1, Msg: &wire.Lookup{ReqID: "r", Round: uint64(i)}}, false)
	}
	if len(o.lookups) != maxTimed {
		t.Fatalf("%d lookups timed, want the cap %d", len(o.lookups), maxTimed)
	}
	o.received(now.Add(time.Millisecond), 1, &wire.LookupResp{ReqID: "r", Round: 0, Hits: []bool{true, false, true}})
	if o.c.LookupHits != 2 || o.c.LookupMisses != 1 || o.h.LookupRTT.Count != 1 {
		t.Fatalf("hits %d misses %d rtt %+v", o.c.LookupHits, o.c.LookupMisses, o.h.LookupRTT)
	}
	o.action(now, loads.Action{Kind: loads.ActClose, Conn: 1, Cause: health.CauseConnReset}, false)
	if len(o.lookups) != 0 {
		t.Fatalf("a closed session's lookups are still timed: %d", len(o.lookups))
	}
}

// TestObserverTooSlow: a load failed as too slow to finish in time is a
// deliberate fallback, counted apart (kvp2p_loads_too_slow_total).
func TestObserverTooSlow(t *testing.T) {
	o := newObserver(time.Unix(1000, 0))
	o.JobSettled(loads.JobResult{Job: 1, Kind: loads.JobLoad, Bytes: 4096, Reason: session.ReasonSlow}, time.Time{})
	if c := o.c; c.LoadsTooSlow != 1 || c.LoadsOverBudget != 0 || c.LoadTimeouts != 0 || c.LoadFailures != 1 {
		t.Fatalf("counters %+v", c)
	}
}
