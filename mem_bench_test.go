package kvp2p

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
//	go test -run '^$' -bench IdleMemory -benchtime 1x .
func BenchmarkIdleMemory(b *testing.B) {
	const memNodes = 16
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
		b.Logf("%d nodes, %d sessions; node: %+v; session: %+v", memNodes, sessions, perNode, perSession)
	}
}

// openSession opens a ready session from consumer c to producer p: a PD
// request's lookup is HIT exactly when its session is ready.
func openSession(tb testing.TB, c, p *tnode) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		id := fmt.Sprintf("mem-%d", i)
		if err := c.m.NewRequest(id, pdParams(tb, id, p)); err != nil {
			tb.Fatal(err)
		}
		v := c.m.Lookup(id, testKey("mem", 0))
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
