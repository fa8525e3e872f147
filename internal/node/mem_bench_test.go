package node

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/proccpu"
)

// BenchmarkIdleMemory measures what an idle node and an idle session cost:
// memNodes nodes on 127.0.0.1 (16 slots of 4 KiB each), then a ready
// session between every pair, then nothing. Heap is the Go heap and
// goroutine stacks in use after a GC (stack, the stacks alone); RSS is the process's resident set
// after returning freed memory to the OS (Linux only). A session counts
// both its ends (its state on both nodes, both sides of its sockets). The
// node's heap figure leaves out its arena (Slots x BlockBytes, 1 MiB here),
// which is the operator's choice; its RSS counts only the arena pages
// touched (none here).
//
// Then every session carries one burst (a lookup of burstKeys keys, one
// frame of 3.2 KB) and is left idle: "burst" is sampled 200 ms after it,
// "after-burst" idleAfterBurst after it, against the same base as the
// session's: what the burst grew, and what it left behind (the buffers
// it grew are given back after 4 heartbeats).
//
// Idle CPU: the process CPU (user and system) per second of wall time over
// idleWindow with the nodes alone (their loops' ticks), per node, and then
// with every session up and idle (heartbeats on top), per session beyond
// the nodes' share; in microseconds of CPU per second.
//
//	go test -run '^$' -bench IdleMemory -benchtime 1x .
func BenchmarkIdleMemory(b *testing.B) {
	const (
		memNodes       = 16
		burstKeys      = 200
		idleAfterBurst = 3 * time.Second // 6 heartbeat intervals
		idleWindow     = time.Second
	)
	for b.Loop() {
		base := sampleMem()
		nodes := make([]*tnode, memNodes)
		for i := range nodes {
			nodes[i] = startTN(b, nodeOpt{mut: func(cfg *Config) {
				cfg.Slots = 16
				cfg.Log = nil
			}})
		}
		withNodes := sampleMem()
		nodeCPU, cpuOK := idleCPU(idleWindow)
		sessions := 0
		for i := range nodes {
			for j := i + 1; j < len(nodes); j++ {
				openSession(b, nodes[i], nodes[j])
				sessions++
			}
		}
		// Let the handshakes' and warm-ups' last frames settle.
		<-time.After(200 * time.Millisecond)
		withSessions := sampleMem()
		allCPU, _ := idleCPU(idleWindow)
		if cpuOK {
			b.ReportMetric(nodeCPU/memNodes, "idle-cpu-us/s/node")
			b.ReportMetric((allCPU-nodeCPU)/float64(sessions), "idle-cpu-us/s/session")
		}
		perNode := withNodes.sub(base, memNodes)
		perSession := withSessions.sub(withNodes, sessions)
		arena := float64(nodes[0].cfg.Slots * nodes[0].cfg.BlockBytes)
		b.ReportMetric(perNode.heap-arena, "heap-B/node-sans-arena")
		b.ReportMetric(perNode.rss, "rss-B/node")
		b.ReportMetric(perNode.goroutines, "goroutines/node")
		b.ReportMetric(perSession.heap, "heap-B/session")
		b.ReportMetric(perSession.stack, "stack-B/session")
		b.ReportMetric(perSession.rss, "rss-B/session")
		b.ReportMetric(perSession.goroutines, "goroutines/session")
		t0 := time.Now()
		for i := range nodes {
			for j := i + 1; j < len(nodes); j++ {
				lookupBurst(b, nodes[i], nodes[j], burstKeys)
			}
		}
		took := time.Since(t0)
		burst := sampleMem().sub(withNodes, sessions)
		<-time.After(idleAfterBurst)
		after := sampleMem().sub(withNodes, sessions)
		b.ReportMetric(burst.heap, "heap-B/session-burst")
		b.ReportMetric(after.heap, "heap-B/session-after-burst")
		b.ReportMetric(after.rss, "rss-B/session-after-burst")
		b.Logf("%d nodes, %d sessions; node: %+v; session: %+v; bursts (%v): %+v; after: %+v", memNodes, sessions, perNode, perSession, took, burst, after)
	}
}

// idleCPU is the process's CPU per second of wall time over window, in
// µs/s, and false where the platform does not say (proccpu).
func idleCPU(window time.Duration) (float64, bool) {
	c0, ok := proccpu.Used()
	t0 := time.Now()
	<-time.After(window)
	c1, _ := proccpu.Used()
	return float64(c1-c0) / 1e3 / time.Since(t0).Seconds(), ok
}

// openSession opens a ready session from consumer c to producer p: a PD
// request's lookup is HIT exactly when its session is ready.
func openSession(tb testing.TB, c, p *tnode) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		id := fmt.Sprintf("mem-%d", i)
		if err := c.m.NewRequest(id, nodetest.PDParams(tb, id, p.PeerID())); err != nil {
			tb.Fatal(err)
		}
		v := c.m.Lookup(id, nodetest.Key("mem", 0))
		c.m.RequestFinished(id)
		if v == Hit {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("no session from %v to %v", c, p)
		}
		<-time.After(time.Millisecond)
	}
}

// lookupBurst sends one Lookup frame of n keys from consumer c to
// producer p, over their ready session.
func lookupBurst(tb testing.TB, c, p *tnode, n int) {
	tb.Helper()
	id := "burst"
	// A symmetric request: its lookups ask the peer (a PD request's are
	// answered HIT locally once its session is ready).
	if err := c.m.NewRequest(id, nodetest.SymParams(tb, id, p.PeerID())); err != nil {
		tb.Fatal(err)
	}
	for k := range n {
		c.m.Lookup(id, nodetest.Key("burst", k))
	}
	c.m.EndStep()
	c.m.RequestFinished(id)
}

type memSample struct {
	heap, stack, rss, goroutines float64
}

func (m memSample) sub(o memSample, per int) memSample {
	n := float64(per)
	return memSample{heap: (m.heap - o.heap) / n, stack: (m.stack - o.stack) / n,
		rss: (m.rss - o.rss) / n, goroutines: (m.goroutines - o.goroutines) / n}
}

func sampleMem() memSample {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memSample{
		heap:       float64(ms.HeapInuse + ms.StackInuse),
		stack:      float64(ms.StackInuse),
		rss:        float64(rssBytes()),
		goroutines: float64(runtime.NumGoroutine()),
	}
}

// rssBytes is VmRSS from /proc/self/status, or 0 where there is none.
func rssBytes() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Bytes()
		if v, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			kb, err := strconv.ParseUint(string(bytes.TrimSuffix(bytes.TrimSpace(v), []byte(" kB"))), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
