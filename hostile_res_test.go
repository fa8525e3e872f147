package kvp2p

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/wire"
)

// Issue 25's attacks on shared resources, by hostile raw peers on
// loopback: attack 3 (lookup pins), 4 (control frames), 6 (the
// pre-handshake gate) and the peer-id flood. docs/security-resources.md
// states the bounds these tests hold.

// TestAttackLookupPinsHealthyKeepsHits is attack 3: one peer's lookups of
// 100 keys each, never fetched, pinned the whole peers' share (64 of 128
// slots); a healthy consumer's lookups of keys the producer held then all
// missed (0 HIT / 20 MISS). With per-peer pin quotas the healthy consumer
// keeps at least 90% of its hits (all of them, in practice) and its loads
// succeed while the attacker keeps looking up.
func TestAttackLookupPinsHealthyKeepsHits(t *testing.T) {
	p := startTN(t, nodeOpt{mut: func(c *Config) { c.Slots = 128 }})
	c := startTN(t, nodeOpt{})
	hot := keysOf("hot", 100)
	for _, k := range hot {
		if err := p.m.PutBlock(k, testBytes(k)); err != nil {
			t.Fatal(err)
		}
	}
	sp := startSpoofer(t, p.PeerID(), "127.0.0.1:1", nil)
	select {
	case <-sp.ready:
	case <-time.After(5 * time.Second):
		t.Fatal("attacker got no session")
	}
	// The attacker looks up every 20 ms (fifty times the rate), a
	// new request each time, and never fetches.
	stop := make(chan struct{})
	var sent atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			sp.send(sp.ctl, &wire.Lookup{ReqID: fmt.Sprintf("pin-%d", i), Round: 1, Keys: hot})
			sent.Add(1)
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	defer func() { close(stop); <-done }()
	waitFor(t, func() bool { return sp.answers.Load() >= 5 })

	const loads, per = 20, 4
	hits := 0
	for i := range loads {
		kv := fmt.Sprintf("good%d", i)
		ks := keysOf(kv, per)
		for _, k := range ks {
			if err := p.m.PutBlock(k, testBytes(k)); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.m.NewRequest(kv, symParams(t, kv, p)); err != nil {
			t.Fatal(err)
		}
		var got []Key
		for j, v := range lookupAll(t, c.m, kv, ks) {
			if v == Hit {
				hits++
				got = append(got, ks[j])
			}
		}
		if len(got) > 0 {
			j, err := c.m.SubmitLoad(kv, got)
			if err != nil {
				t.Fatal(err)
			}
			if r := waitResult(t, c.m, j, 10*time.Second); !r.OK {
				t.Fatalf("healthy load %d failed beside the pinning peer: %+v", i, r)
			}
			checkBlocks(t, c.m, got)
		}
		c.m.RequestFinished(kv)
	}
	st, err := p.m.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("attack 3: healthy consumer %d HIT / %d MISS of %d lookups beside %d attacker lookups of %d keys; producer pins %d of 128",
		hits, loads*per-hits, loads*per, sent.Load(), len(hot), st.Pinned)
	if hits*10 < loads*per*9 {
		t.Fatalf("healthy consumer kept %d of %d hits (< 90%%) beside a pinning peer", hits, loads*per)
	}
	if st.Pinned > 64 {
		t.Fatalf("peers pin %d slots, over the peers' share (64)", st.Pinned)
	}
}
