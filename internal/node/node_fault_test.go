package node

import (
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest"
)

// TestLoopbackKilledPeerFallsBack: a PD load to a producer that dies
// mid-request fails at once (its connections reset), the request's lookup
// is MISS afterwards, and the consumer leaks no slot.
func TestLoopbackKilledPeerFallsBack(t *testing.T) {
	p := startNode(t, nil)
	c := startNode(t, nil)
	cm := c.Manager()
	host, port := nodetest.SplitPeer(t, p.PeerID())
	params := TransferParams{RemotePrefiller: &Remote{KVRequestID: "kv1", RemoteHost: host, RemotePort: port}}
	ks := []Key{nodetest.Key("k", 0), nodetest.Key("k", 1)}
	deadline := time.Now().Add(5 * time.Second)
	for cm.NewRequest("d1", params); cm.Lookup("d1", ks[0]) != Hit; cm.NewRequest("d1", params) {
		cm.RequestFinished("d1")
		if time.Now().After(deadline) {
			t.Fatal("no session")
		}
		<-time.After(5 * time.Millisecond)
	}
	// Decoder first: nothing stored yet, so the load waits on the producer.
	lj, _ := cm.SubmitLoad("d1", ks)
	<-time.After(50 * time.Millisecond)
	killed := time.Now()
	p.Close()
	r := waitResult(t, cm, lj, 5*time.Second)
	if r.OK {
		t.Fatal("load to a killed peer succeeded")
	}
	if took := time.Since(killed); took > 2*time.Second {
		t.Fatalf("fallback took %v after the kill", took)
	}
	if v := cm.Lookup("d1", ks[0]); v != Miss {
		t.Fatalf("lookup after the failure = %v, want MISS", v)
	}
	cm.RequestFinished("d1")
	nodetest.WaitFor(t, func() bool { st, err := cm.Stats(); return err == nil && st.Filling == 0 && st.Pinned == 0 })
}
