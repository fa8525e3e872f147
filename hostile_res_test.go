package kvp2p

import (
	"encoding/binary"
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

// TestAttackControlFrameMemory is attack 4: sessions each announcing a
// 4 MiB control frame and sending all of it but the last 64 bytes took the
// process from 17 to 513 MB, and it stayed. Control frames are now at most
// ControlFrameLimit (a 4 MiB header ends the session at once), buffers
// grow only as bytes arrive, and what frames past 64 KiB hold between them
// is within max_frame_memory (4 MiB here): the heap stays within
// sessions x 64 KiB + max_frame_memory + session state, and goes back once
// the attackers' sessions end.
func TestAttackControlFrameMemory(t *testing.T) {
	const budget = 4 << 20
	p := startTN(t, nodeOpt{mut: func(c *Config) {
		c.Timers.MaxPeers = 200
		c.Limits.MaxFrameMemory = budget
	}})
	const sessions, huge = 40, 8
	sps := make([]*spoofer, sessions+huge)
	for i := range sps {
		sps[i] = startSpoofer(t, p.PeerID(), fmt.Sprintf("127.0.0.1:%d", 30000+i), nil)
		select {
		case <-sps[i].ready:
		case <-time.After(5 * time.Second):
			t.Fatalf("attacker %d got no session", i)
		}
	}
	heap0 := heapInUse()
	limit := int(wire.ControlFrameLimit(wire.DefaultLimits()))
	frame := func(size int) []byte {
		b := make([]byte, size-64) // all but the last 64 bytes
		binary.BigEndian.PutUint32(b, uint32(size-4))
		b[4], b[5] = wire.Version, byte(wire.TypeLookup)
		return b
	}
	var peak atomic.Int64
	watch := make(chan struct{})
	watched := make(chan struct{})
	go func() { // the budget's use, sampled while the attack goes on
		defer close(watched)
		for {
			peak.Store(max(peak.Load(), p.frameMem.Used()))
			select {
			case <-watch:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	errs := make(chan error, len(sps))
	for i, sp := range sps {
		size := limit
		if i >= sessions {
			size = 4 << 20 // the header: over the limit
		}
		go func() {
			_, err := sp.ctl.Write(frame(size))
			errs <- err // an error: the node closed the session first
		}()
	}
	for range sps {
		<-errs
	}
	for i := sessions; i < len(sps); i++ {
		waitClosed(t, sps[i].ended, fmt.Sprintf("session %d announcing a 4 MiB control frame", i))
	}
	// The node reads what the kernel holds: wait until its readers are
	// quiet (no session ending, the budget's use unchanged for 200 ms).
	ended := func() int {
		k := 0
		for _, sp := range sps[:sessions] {
			select {
			case <-sp.ended:
				k++
			default:
			}
		}
		return k
	}
	deadline := time.Now().Add(10 * time.Second)
	for last, lastUsed, still := -1, int64(-1), 0; still < 20 && time.Now().Before(deadline); {
		k, u := ended(), p.frameMem.Used()
		if k == last && u == lastUsed {
			still++
		} else {
			still = 0
		}
		last, lastUsed = k, u
		<-time.After(10 * time.Millisecond)
	}
	heap1 := heapInUse()
	close(watch)
	<-watched
	grew := int64(heap1) - int64(heap0)
	bound := int64(sessions*(64<<10) + budget + 8<<20) // 8 MiB: session state and the test's own buffers
	t.Logf("attack 4: %d sessions sent %d of a %d-byte control frame, %d announced 4 MiB: %d sessions ended, budget peak %d of %d, heap %+d KiB (bound %d KiB)",
		sessions, limit-64, limit, huge, ended(), peak.Load(), budget, grew>>10, bound>>10)
	if peak.Load() > budget {
		t.Fatalf("frame budget used %d, over its %d", peak.Load(), budget)
	}
	if grew > bound {
		t.Fatalf("heap grew %d KiB, over the bound %d KiB", grew>>10, bound>>10)
	}
	if ended() == 0 {
		t.Fatalf("no session ended: %d sessions hold %d-byte frames within a %d budget?", sessions, limit, budget)
	}
	for _, sp := range sps {
		sp.ctl.Close()
		sp.data.Close()
	}
	waitFor(t, func() bool { return p.frameMem.Used() == 0 })
}
