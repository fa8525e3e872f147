package node

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest"
)

// TestLookupWait: a waiter parked on a RETRY verdict gets HIT once the
// producer answers, without polling; one whose context ends gets RETRY;
// after the node stopped it gets MISS, like Lookup.
func TestLookupWait(t *testing.T) {
	p := startTN(t, nodeOpt{})
	c := startTN(t, nodeOpt{})
	warm(t, c, p)
	k := nodetest.Key("wait", 0)
	if err := p.m.PutBlock(k, nodetest.Bytes(k)); err != nil {
		t.Fatal(err)
	}
	if err := c.m.NewRequest("w1", nodetest.SymParams(t, "kv-w1", p.PeerID())); err != nil {
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

// countLn counts the writes of every connection it accepted.
type countLn struct {
	net.Listener
	writes *atomic.Int64
}

func (l countLn) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return writeCountConn{nc, l.writes}, nil
}

type writeCountConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c writeCountConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestLookupBurstBatches: a step of 1000 requests' lookups to one producer
// is answered in few socket writes, not one per lookup: the loop queues
// the replies of every event it has and the writer sends what queued up
// while it was writing, in one write.
func TestLookupBurstBatches(t *testing.T) {
	var writes atomic.Int64
	// A HIT reserves a consumer slot: room for the whole burst, in small
	// blocks (the bytes are never moved).
	big := func(cfg *Config) { cfg.Slots, cfg.BlockBytes = 2048, 4096 }
	p := startTN(t, nodeOpt{mut: big, wrapLn: func(l net.Listener) net.Listener { return countLn{l, &writes} }})
	c := startTN(t, nodeOpt{mut: big})
	warm(t, c, p)
	const burst = 1000
	k := nodetest.Key("burst", 0)
	if err := p.m.PutBlock(k, nodetest.Bytes(k)[:4096]); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, burst)
	for i := range ids {
		ids[i] = fmt.Sprintf("b%d", i)
		if err := c.m.NewRequest(ids[i], nodetest.SymParams(t, "kv-"+ids[i], p.PeerID())); err != nil {
			t.Fatal(err)
		}
		if v := c.m.Lookup(ids[i], k); v != Retry {
			t.Fatalf("first lookup = %v", v)
		}
	}
	before := writes.Load()
	c.m.EndStep()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, id := range ids {
		if v := c.m.LookupWait(ctx, id, k); v != Hit {
			t.Fatalf("%s: %v, want HIT", id, v)
		}
	}
	n := writes.Load() - before
	t.Logf("%d lookups answered in %d writes", burst, n)
	// Quiet runs take under 10 writes, -race on a busy machine about 50;
	// a writer that sent each reply on its own would take about 1000.
	if n > burst/4 {
		t.Fatalf("%d lookups answered in %d writes, want at most %d", burst, n, burst/4)
	}
	for _, id := range ids {
		c.m.RequestFinished(id)
	}
}
