package node

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// TestFloodBesideHealthyPeer is finding 4: a peer flooding a producer with
// lookups (each for a new request) and with fetches nothing backs used to
// make work and state proportional to what it sent (every tick scanned
// every round), and a healthy consumer's loads beside it timed out. Now
// the attacker's rounds are capped, its fetches over max_inflight end its
// session, and the healthy consumer's loads all succeed. Heap and CPU are
// logged for the note (go test -v -run FloodBeside).
func TestFloodBesideHealthyPeer(t *testing.T) {
	p := startTN(t, nodeOpt{})
	c := startTN(t, nodeOpt{})
	warm(t, c, p)
	sp := startSpoofer(t, p.PeerID(), "127.0.0.1:1", nil)
	select {
	case <-sp.ready:
	case <-time.After(5 * time.Second):
		t.Fatal("attacker got no session")
	}
	heap0, cpu0, t0 := heapInUse(), nodetest.CPUTime(), time.Now()

	const lookups, fetches = 60000, 20000
	flooded := make(chan struct{})
	go func() {
		defer close(flooded)
		k := []wire.Key{nodetest.Key("flood", 0)}
		for i := range lookups {
			sp.send(sp.ctl, &wire.Lookup{ReqID: fmt.Sprintf("l%d", i), Round: 1, Keys: k})
		}
		for i := range fetches {
			sp.send(sp.ctl, &wire.Fetch{ReqID: fmt.Sprintf("f%d", i), Job: uint64(i + 1), Keys: k, Slots: []uint32{0}})
		}
	}()

	// The healthy consumer loads beside it, one request after another.
	const loads = 20
	for i := range loads {
		kv := fmt.Sprintf("ok%d", i)
		ks := nodetest.Keys(kv, 2)
		storeBlocks(t, p, kv, ks)
		if err := c.m.NewRequest("d"+kv, nodetest.PDParams(t, kv, p.PeerID())); err != nil {
			t.Fatal(err)
		}
		if v := waitVerdict(t, c.m, "d"+kv, ks[0]); v != Hit {
			t.Fatalf("load %d: lookup %v", i, v)
		}
		j, _ := c.m.SubmitLoad("d"+kv, ks)
		if r := waitResult(t, c.m, j, 10*time.Second); !r.OK {
			t.Fatalf("healthy load %d of %d failed beside the flood: %+v", i, loads, r)
		}
		c.m.RequestFinished("d" + kv)
	}
	select {
	case <-flooded:
	case <-time.After(30 * time.Second):
		t.Fatal("the flood did not go out within 30 s")
	}
	<-time.After(200 * time.Millisecond) // the last frames are handled
	heap1, cpu1 := heapInUse(), nodetest.CPUTime()
	t.Logf("flood of %d lookups + %d fetches: %v wall, %v CPU (whole process), heap %+d KiB",
		lookups, fetches, time.Since(t0).Round(time.Millisecond), (cpu1 - cpu0).Round(time.Millisecond),
		(int64(heap1)-int64(heap0))>>10)
	if grew := int64(heap1) - int64(heap0); grew > 32<<20 {
		t.Fatalf("heap grew %d MiB during the flood", grew>>20)
	}
	waitLog(t, p, "peer over its lookup quota")
}
