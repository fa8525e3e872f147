package node

import (
	"context"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest"
)

// TestWaitFinished: a waiter blocked with nothing settled gets a load's
// result once the load ends, without polling; a settled result returns
// at once; with nothing open and a done context it returns nil; after the
// node stopped it returns what was never taken, a failed result for every
// job cut short, like PollFinished.
func TestWaitFinished(t *testing.T) {
	p := startTN(t, nodeOpt{})
	c := startTN(t, nodeOpt{})
	warm(t, c, p)
	keys := nodetest.Keys("waitfin", 4)
	for _, k := range keys {
		if err := p.m.PutBlock(k, nodetest.Bytes(k)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Nothing submitted: the context decides.
	done, stop := context.WithCancel(ctx)
	stop()
	if r := c.m.WaitFinished(done); r != nil {
		t.Fatalf("WaitFinished with nothing open and a done context = %+v, want nil", r)
	}

	// A PD load: the waiter parks before the producer has the store, so
	// only the load's end can wake it.
	if err := c.m.NewRequest("d1", nodetest.PDParams(t, "kv1", p.PeerID())); err != nil {
		t.Fatal(err)
	}
	lj, err := c.m.SubmitLoad("d1", keys)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []JobResult, 1)
	go func() { got <- c.m.WaitFinished(ctx) }()
	if err := p.m.NewRequest("p1", TransferParams{RemoteDecoder: &Remote{KVRequestID: "kv1"}}); err != nil {
		t.Fatal(err)
	}
	sj, err := p.m.SubmitStore("p1", keys)
	if err != nil {
		t.Fatal(err)
	}
	r := <-got
	if len(r) != 1 || r[0].Job != lj || !r[0].OK {
		t.Fatalf("WaitFinished = %+v, want job %d OK", r, lj)
	}
	if r := p.m.WaitFinished(ctx); len(r) != 1 || r[0].Job != sj || !r[0].OK {
		t.Fatalf("producer's WaitFinished = %+v, want store job %d OK", r, sj)
	}
	for _, k := range keys {
		if b, ok := c.m.ReadBlock(k); !ok || string(b) != string(nodetest.Bytes(k)) {
			t.Fatalf("block %x not loaded intact", k[:4])
		}
	}

	// A load that cannot end (its producer never stores) is cut short by
	// Close: the waiter gets its failed result.
	if err := c.m.NewRequest("d2", nodetest.PDParams(t, "kv2", p.PeerID())); err != nil {
		t.Fatal(err)
	}
	lj2, err := c.m.SubmitLoad("d2", nodetest.Keys("waitfin-none", 1))
	if err != nil {
		t.Fatal(err)
	}
	go func() { got <- c.m.WaitFinished(ctx) }()
	c.Close()
	<-c.done
	if r := <-got; len(r) != 1 || r[0].Job != lj2 || r[0].OK {
		t.Fatalf("WaitFinished across Close = %+v, want job %d failed", r, lj2)
	}
	if r := c.m.WaitFinished(ctx); len(r) != 0 {
		t.Fatalf("WaitFinished after the last result = %+v, want none", r)
	}
}
