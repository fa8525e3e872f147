package node

import (
	"strings"
	"sync"
	"sync/atomic"
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
//
// The case needs the connect itself to return within the unanswered
// window: on a busy machine the dial goroutine may be starved before its
// connect too, and then the kernel rightly says nothing is connected yet.
// The test measures when the connect returned; a run where it returned
// too late tested nothing and is tried again.
func TestStarvedDialNotTakenForPartition(t *testing.T) {
	const (
		held       = 150 * time.Millisecond
		unanswered = 50 * time.Millisecond // health's default Waits.Unanswered
		tries      = 5
	)
	for try := 1; try <= tries; try++ {
		connected, tested := starvedDial(t, held, unanswered)
		if tested {
			return
		}
		t.Logf("try %d: the connect returned %v after the request, not within %v: the case was not tested", try, connected, unanswered)
	}
	t.Skipf("in %d tries the connect never returned within %v of the request: this machine is too busy to test the case", tries, unanswered)
}

// starvedDial runs the case once. It returns when the held dial's connect
// returned after the request, and whether that was within unanswered (if
// not, it asserts nothing).
func starvedDial(t *testing.T, held, unanswered time.Duration) (time.Duration, bool) {
	p := startTN(t, nodeOpt{})
	c := startTN(t, nodeOpt{})
	var once sync.Once
	var connectedAt atomic.Int64 // after start, in ns; 0: not yet
	start := time.Now()
	c.Node.testDialHeld = func() { // set before any dial: the request below starts the first
		once.Do(func() {
			connectedAt.Store(int64(max(time.Since(start), 1)))
			tm := time.NewTimer(held)
			defer tm.Stop()
			<-tm.C
		})
	}
	if err := c.m.NewRequest("r", nodetest.PDParams(t, "r", p.PeerID())); err != nil {
		t.Fatal(err)
	}
	v := Retry
	for v == Retry && time.Since(start) < 3*time.Second {
		v = c.m.Lookup("r", nodetest.Key("w", 0))
		c.m.EndStep()
		<-time.After(2 * time.Millisecond)
	}
	took := time.Since(start)
	c.m.RequestFinished("r")
	connected := time.Duration(connectedAt.Load())
	if connected == 0 || connected >= unanswered {
		return connected, false
	}
	logs := c.logs.String()
	if strings.Contains(logs, "replacing a stale connect attempt") {
		t.Errorf("a connect the kernel answered (%v after the request) was taken for one into a partition:\n%s", connected, logs)
	}
	if v != Hit {
		t.Fatalf("verdict %v after %v, want HIT once the held dial goroutine ran (%v)\n%s", v, took, held, logs)
	}
	if took < held {
		t.Fatalf("HIT after %v, before the dial goroutine was released (%v): the hold did not hold", took, held)
	}
	waitQuiet(t, c.m)
	waitQuiet(t, p.m)
	return connected, true
}
