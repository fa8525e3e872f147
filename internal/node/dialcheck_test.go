package node

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest"
)

// TestStarvedDialNotTakenForPartition (issue 24, item 4: starvation blames
// nobody): the table takes a dial whose connect is not reported within
// 50 ms for one sent into a partition (health.Waits.Unanswered). Here the
// consumer's dial goroutine is held for 150 ms right after its connect
// returned, as a goroutine starved of CPU is (testDialHeld); the peer's
// kernel answered at once. The loop asks the kernel (checkDials): the
// attempt is not replaced, the request waits on it and hits once the
// handshake finishes. Taking the goroutine's word alone, the attempt was
// replaced ("replacing a stale connect attempt", 64 ms, in a real-engine
// run) and the request could fall back.
func TestStarvedDialNotTakenForPartition(t *testing.T) {
	const held = 150 * time.Millisecond
	p := startTN(t, nodeOpt{})
	c := startTN(t, nodeOpt{})
	var once sync.Once
	c.Node.testDialHeld = func() { // set before any dial: the request below starts the first
		once.Do(func() {
			tm := time.NewTimer(held)
			defer tm.Stop()
			<-tm.C
		})
	}
	if err := c.m.NewRequest("r", nodetest.PDParams(t, "r", p.PeerID())); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	v := Retry
	for v == Retry && time.Since(start) < 3*time.Second {
		v = c.m.Lookup("r", nodetest.Key("w", 0))
		c.m.EndStep()
		<-time.After(2 * time.Millisecond)
	}
	took := time.Since(start)
	c.m.RequestFinished("r")
	logs := c.logs.String()
	if strings.Contains(logs, "replacing a stale connect attempt") {
		t.Errorf("a connect the kernel answered was taken for one into a partition:\n%s", logs)
	}
	if v != Hit {
		t.Fatalf("verdict %v after %v, want HIT once the held dial goroutine ran (%v)\n%s", v, took, held, logs)
	}
	if took < held {
		t.Fatalf("HIT after %v, before the dial goroutine was released (%v): the hold did not hold", took, held)
	}
	waitQuiet(t, c.m)
	waitQuiet(t, p.m)
}
