package node

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest"
)

// TestAbortMidTransfer: the consumer's request finishes while a large load
// streams. The load fails at once, but its destination slots stay Filling
// (so nothing can reuse them) until the producer's writer has stopped; then
// they are freed, and a later load into the same slots gets its own bytes.
func TestAbortMidTransfer(t *testing.T) {
	const blocks = 64
	p := startTN(t, nodeOpt{wrap: true, mut: func(c *Config) { c.Slots = 2 * blocks; c.Timers.HeartbeatTimeout = 5 * time.Second }})
	// The consumer's arena is exactly one load: while the aborted load's
	// slots are fenced, no other load can get a slot.
	c := startTN(t, nodeOpt{mut: func(c *Config) { c.Slots = blocks; c.Timers.HeartbeatTimeout = 5 * time.Second }})
	warm(t, c, p)
	ks := nodetest.Keys("big", blocks)
	sj := storeBlocks(t, p, "kv1", ks)
	paused := p.fl.pauseAfter(8 * nodetest.BlockBytes)
	c.m.NewRequest("d1", nodetest.PDParams(t, "kv1", p.PeerID()))
	lj, _ := c.m.SubmitLoad("d1", ks)
	waitClosed(t, paused, "the producer's writer blocking mid-transfer")

	c.m.RequestFinished("d1")
	if r := waitResult(t, c.m, lj, 5*time.Second); r.OK {
		t.Fatalf("aborted load reported OK: %+v", r)
	}
	// The producer's writer is stuck in a write: the slots are still fenced.
	for range 5 {
		st, err := c.m.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if st.Filling != blocks {
			t.Fatalf("slots freed while the producer's writer may still send into them: %+v", st)
		}
		c.m.NewRequest("d2", nodetest.PDParams(t, "kv2", p.PeerID()))
		j2, _ := c.m.SubmitLoad("d2", nodetest.Keys("other", 1))
		if r := waitResult(t, c.m, j2, 5*time.Second); r.OK || !strings.Contains(r.Reason, "no destination slot") {
			t.Fatalf("a load got a slot while the aborted load's were fenced: %+v", r)
		}
		c.m.RequestFinished("d2")
		<-time.After(20 * time.Millisecond)
	}
	p.fl.resume()
	waitQuiet(t, c.m) // AbortAck and the data path's terminal frame: freed
	if r := waitResult(t, p.m, sj, 5*time.Second); r.OK {
		t.Fatalf("store job of an aborted transfer reported OK: %+v", r)
	}
	for _, k := range ks {
		if _, ok := c.m.ReadBlock(k); ok {
			t.Fatalf("block %x of the aborted load is readable", k[:4])
		}
	}

	// The same slots now take a new load, and hold its bytes only.
	ks3 := nodetest.Keys("after", blocks)
	sj3 := storeBlocks(t, p, "kv3", ks3)
	c.m.NewRequest("d3", nodetest.PDParams(t, "kv3", p.PeerID()))
	lj3, _ := c.m.SubmitLoad("d3", ks3)
	if r := waitResult(t, c.m, lj3, 10*time.Second); !r.OK {
		t.Fatalf("load after the abort: %+v", r)
	}
	if r := waitResult(t, p.m, sj3, 5*time.Second); !r.OK {
		t.Fatalf("store after the abort: %+v", r)
	}
	checkBlocks(t, c.m, ks3)
	c.m.RequestFinished("d3")
	p.m.RequestFinished("p-kv1")
	p.m.RequestFinished("p-kv3")
	waitQuiet(t, c.m)
	waitQuiet(t, p.m)
}

// TestCorruptChunkFailsLoad: one payload byte flipped on the wire fails the
// load (CRC32C), and no block of it ever becomes readable.
func TestCorruptChunkFailsLoad(t *testing.T) {
	p := startTN(t, nodeOpt{wrap: true})
	c := startTN(t, nodeOpt{})
	warm(t, c, p)
	ks := nodetest.Keys("crc", 8)
	storeBlocks(t, p, "kv1", ks)
	flipped := p.fl.flipNext()
	c.m.NewRequest("d1", nodetest.PDParams(t, "kv1", p.PeerID()))
	lj, _ := c.m.SubmitLoad("d1", ks)
	r := waitResult(t, c.m, lj, 5*time.Second)
	waitClosed(t, flipped, "the flip")
	if r.OK {
		t.Fatalf("load with a corrupt chunk reported OK: %+v", r)
	}
	waitLog(t, c, "corrupt chunk")
	waitQuiet(t, c.m)
	for _, k := range ks {
		if _, ok := c.m.ReadBlock(k); ok {
			t.Fatalf("block %x of the corrupt load is readable", k[:4])
		}
	}
	if st, _ := c.m.Stats(); st.Ready != 0 {
		t.Fatalf("a block of the corrupt load was committed: %+v", st)
	}
	// The source's own copy was never touched: a fresh request loads it intact.
	c.m.RequestFinished("d1")
	p.m.RequestFinished("p-kv1")
	storeBlocks(t, p, "kv2", ks)
	c.m.NewRequest("d2", nodetest.PDParams(t, "kv2", p.PeerID()))
	if v := waitVerdict(t, c.m, "d2", ks[0]); v != Hit {
		t.Fatalf("lookup after the corrupt load = %v (session ended: %s)", v, c.logs)
	}
	lj2, _ := c.m.SubmitLoad("d2", ks)
	if r := waitResult(t, c.m, lj2, 5*time.Second); !r.OK {
		t.Fatalf("reload: %+v", r)
	}
	checkBlocks(t, c.m, ks)
}

// TestLoopbackKilledPeerSymmetric: a symmetric source dies with a load in
// flight and another request's lookups outstanding: the load fails, the
// outstanding lookups resolve MISS, and no slot leaks.
func TestLoopbackKilledPeerSymmetric(t *testing.T) {
	p := startTN(t, nodeOpt{wrap: true})
	c := startTN(t, nodeOpt{})
	warm(t, c, p)
	ks := nodetest.Keys("ksym", 16)
	for _, k := range ks {
		if err := p.m.PutBlock(k, nodetest.Bytes(k)); err != nil {
			t.Fatal(err)
		}
	}
	c.m.NewRequest("s1", nodetest.SymParams(t, "kv-s1", p.PeerID()))
	for i, v := range lookupAll(t, c.m, "s1", ks) {
		if v != Hit {
			t.Fatalf("key %d: %v, want HIT", i, v)
		}
	}
	// s2's lookups are registered but not flushed: the step has not ended.
	c.m.NewRequest("s2", nodetest.SymParams(t, "kv-s2", p.PeerID()))
	if v := c.m.Lookup("s2", ks[0]); v != Retry {
		t.Fatalf("s2 lookup = %v, want RETRY", v)
	}
	paused := p.fl.pauseAfter(4 * nodetest.BlockBytes)
	lj, _ := c.m.SubmitLoad("s1", ks)
	waitClosed(t, paused, "the load streaming")
	killed := time.Now()
	p.Close()
	r := waitResult(t, c.m, lj, 5*time.Second)
	if r.OK {
		t.Fatal("load from a killed peer succeeded")
	}
	if took := time.Since(killed); took > 3*time.Second {
		t.Fatalf("fallback took %v after the kill", took)
	}
	if vs := lookupAll(t, c.m, "s2", ks[:1]); vs[0] != Miss {
		t.Fatalf("outstanding lookup after the kill = %v, want MISS", vs[0])
	}
	if v := c.m.Lookup("s1", ks[0]); v != Miss {
		t.Fatalf("lookup of the failed request = %v, want MISS", v)
	}
	c.m.RequestFinished("s1")
	c.m.RequestFinished("s2")
	waitQuiet(t, c.m)
}

// TestSilentDataPath: the data connection goes silent (blackholed) while
// the control connection lives. Under domain the progress watchdog fails
// the load within about stall_timeout (1 s); under per-peer (no watchdog)
// it waits for the load timeout. Heartbeat timeouts are raised so that the
// data connections' read timeouts cannot fire first.
func TestSilentDataPath(t *testing.T) {
	for _, tt := range []struct {
		policy      string
		loadTimeout time.Duration
		reason      string
		atLeast     time.Duration // the result cannot come before this
		within      time.Duration // generous bound on when it comes
	}{
		{"domain", 20 * time.Second, "progress-stall", 0, 3 * time.Second},
		{"per-peer", 2500 * time.Millisecond, "load timed out", 2500 * time.Millisecond, 8 * time.Second},
	} {
		t.Run(tt.policy, func(t *testing.T) {
			mut := func(c *Config) {
				c.Policy = tt.policy
				c.Timers.HeartbeatTimeout = 5 * time.Second
				c.Timers.LoadTimeoutPD = tt.loadTimeout
			}
			p := startTN(t, nodeOpt{wrap: true, mut: mut})
			c := startTN(t, nodeOpt{mut: mut})
			warm(t, c, p)
			ks := nodetest.Keys("silent", 4)
			storeBlocks(t, p, "kv1", ks)
			p.fl.blackhole(true)
			c.m.NewRequest("d1", nodetest.PDParams(t, "kv1", p.PeerID()))
			start := time.Now()
			lj, _ := c.m.SubmitLoad("d1", ks)
			r := waitResult(t, c.m, lj, tt.within)
			took := time.Since(start)
			if r.OK {
				t.Fatalf("load over a silent data path succeeded: %+v", r)
			}
			if !strings.Contains(r.Reason, tt.reason) {
				t.Fatalf("load failed with %q, want %q", r.Reason, tt.reason)
			}
			if took < tt.atLeast {
				t.Fatalf("load failed after %v, before the load timeout %v", took, tt.atLeast)
			}
			t.Logf("%s: load failed after %v: %s", tt.policy, took.Round(time.Millisecond), r.Reason)
			for _, k := range ks {
				if _, ok := c.m.ReadBlock(k); ok {
					t.Fatalf("block %x readable after a failed load", k[:4])
				}
			}
		})
	}
}

// pollAll collects m's results until stop is closed, then once more: after
// a node stopped, PollFinished returns what its shutdown settled.
func pollAll(m *Manager, stop <-chan struct{}) <-chan []JobResult {
	out := make(chan []JobResult, 1)
	go func() {
		var all []JobResult
		for {
			all = append(all, m.PollFinished()...)
			select {
			case <-stop:
				all = append(all, m.PollFinished()...)
				out <- all
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return out
}

// readStopped reads a block from a stopped node's store (no loop runs).
func readStopped(n *tnode, k Key) ([]byte, bool) {
	sl, ok := n.st.Lookup(k)
	if !ok {
		return nil, false
	}
	return n.st.Bytes(sl), true
}

// TestShutdownWithLoadsInFlight: Node.Shutdown while transfers stream.
// Every job gets exactly one result (PollFinished still answers after the
// node stopped), a load reported OK has its bytes, and the stopped node
// holds no Filling or Pinned slot.
func TestShutdownWithLoadsInFlight(t *testing.T) {
	const reqs, blocks = 4, 16
	for _, tt := range []struct {
		name   string
		who    string // the node shut down
		resume bool   // the producer's writer resumes (else it stays blocked past the drain)
		allOK  bool
	}{
		{"consumer drains", "consumer", true, true},
		{"consumer drain times out", "consumer", false, false},
		{"producer drains", "producer", true, true}, // what it acknowledged as served is loaded
	} {
		t.Run(tt.name, func(t *testing.T) {
			hb := func(c *Config) {
				c.Timers.HeartbeatTimeout = 5 * time.Second
				c.Timers.ShutdownDrain = 10 * time.Second
				if !tt.resume {
					c.Timers.ShutdownDrain = 300 * time.Millisecond
				}
			}
			p := startTN(t, nodeOpt{wrap: true, mut: hb})
			c := startTN(t, nodeOpt{mut: hb})
			warm(t, c, p)
			keys := map[uint64][]Key{}
			stores := map[uint64]bool{}
			for i := range reqs {
				kv := fmt.Sprintf("kv%d", i)
				ks := nodetest.Keys(kv, blocks)
				stores[storeBlocks(t, p, kv, ks)] = true
				keys[uint64(i)] = ks
			}
			paused := p.fl.pauseAfter(5 * nodetest.BlockBytes)
			loads := map[uint64][]Key{}
			for i := range reqs {
				kv := fmt.Sprintf("kv%d", i)
				c.m.NewRequest("d"+kv, nodetest.PDParams(t, kv, p.PeerID()))
				j, _ := c.m.SubmitLoad("d"+kv, keys[uint64(i)])
				loads[j] = keys[uint64(i)]
			}
			waitClosed(t, paused, "the transfers streaming")

			down := c
			if tt.who == "producer" {
				down = p
			}
			stopped := make(chan struct{})
			cRes := pollAll(c.m, stopped)
			pRes := pollAll(p.m, stopped)
			shut := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				shut <- down.Shutdown(ctx)
			}()
			if tt.resume {
				<-time.After(100 * time.Millisecond) // let the shutdown begin with the writer blocked
				p.fl.resume()
			}
			select {
			case err := <-shut:
				if err != nil {
					t.Fatalf("shutdown: %v", err)
				}
			case <-time.After(25 * time.Second):
				t.Fatal("shutdown did not return")
			}
			if tt.who == "producer" {
				// The consumer's loads settle on the producer's goodbye.
				deadline := time.Now().Add(5 * time.Second)
				for {
					st, _ := c.m.Stats()
					if st.Filling == 0 || time.Now().After(deadline) {
						break
					}
					<-time.After(5 * time.Millisecond)
				}
			}
			close(stopped)
			cAll, pAll := <-cRes, <-pRes
			final, err := down.FinalStats()
			if err != nil {
				t.Fatalf("store check: %v", err)
			}
			if final.Filling != 0 || final.Pinned != 0 {
				t.Fatalf("%s stopped holding slots: %+v", tt.who, final)
			}

			seen := map[uint64]int{}
			okLoads := 0
			for _, r := range cAll {
				if _, mine := loads[r.Job]; !mine || r.Kind != JobLoad {
					continue
				}
				seen[r.Job]++
				if !r.OK {
					continue
				}
				okLoads++
				for _, k := range loads[r.Job] {
					var got []byte
					var ok bool
					if tt.who == "consumer" {
						got, ok = readStopped(c, k)
					} else {
						got, ok = c.m.ReadBlock(k)
					}
					if !ok || !bytes.Equal(got, nodetest.Bytes(k)) {
						t.Fatalf("job %d reported OK but block %x is missing or wrong", r.Job, k[:4])
					}
				}
			}
			for j := range loads {
				if seen[j] != 1 {
					t.Fatalf("load %d got %d results, want exactly 1 (all: %+v)", j, seen[j], cAll)
				}
			}
			if tt.allOK && okLoads != reqs {
				t.Fatalf("%d of %d loads OK; the drain should have let them all finish: %+v", okLoads, reqs, cAll)
			}
			if !tt.resume && okLoads != 0 {
				t.Fatalf("%d loads OK with the writer blocked past the drain", okLoads)
			}
			if tt.who == "producer" {
				sseen := map[uint64]int{}
				for _, r := range pAll {
					if stores[r.Job] && r.Kind == JobStore {
						sseen[r.Job]++
					}
				}
				for j := range stores {
					if sseen[j] != 1 {
						t.Fatalf("store %d got %d results, want exactly 1 (all: %+v)", j, sseen[j], pAll)
					}
				}
				waitQuiet(t, c.m)
			}
			t.Logf("%s: %d of %d loads OK: %+v", tt.name, okLoads, reqs, cAll)
			if testing.Verbose() && okLoads < reqs {
				t.Logf("consumer log:\n%s\nproducer log:\n%s", c.logs, p.logs)
			}
		})
	}
}
