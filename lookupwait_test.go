package kvp2p

import (
	"context"
	"testing"
	"time"
)

// TestLookupWait: a waiter parked on a RETRY verdict gets HIT once the
// producer answers, without polling; one whose context ends gets RETRY;
// after the node stopped it gets MISS, like Lookup.
func TestLookupWait(t *testing.T) {
	p := startTN(t, nodeOpt{})
	c := startTN(t, nodeOpt{})
	warm(t, c, p)
	k := testKey("wait", 0)
	if err := p.m.PutBlock(k, testBytes(k)); err != nil {
		t.Fatal(err)
	}
	if err := c.m.NewRequest("w1", symParams(t, "kv-w1", p)); err != nil {
		t.Fatal(err)
	}
	if v := c.m.Lookup("w1", k); v != Retry {
		t.Fatalf("first lookup = %v, want RETRY", v)
	}
	// Not flushed yet: nothing can settle it, so the context decides.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if v := c.m.LookupWait(ctx, "w1", k); v != Retry {
		t.Fatalf("LookupWait with a done context = %v, want RETRY", v)
	}
	c.m.EndStep()
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if v := c.m.LookupWait(ctx, "w1", k); v != Hit {
		t.Fatalf("LookupWait = %v, want HIT", v)
	}
	// A settled verdict returns at once.
	if v := c.m.LookupWait(ctx, "w1", k); v != Hit {
		t.Fatalf("LookupWait again = %v, want HIT", v)
	}
	c.m.RequestFinished("w1")
	c.Close()
	<-c.done
	if v := c.m.LookupWait(ctx, "w2", k); v != Miss {
		t.Fatalf("LookupWait after close = %v, want MISS", v)
	}
}
