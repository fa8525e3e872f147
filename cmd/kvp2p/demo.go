package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/kvp2p/kvp2p"
)

const demoIntro = `kvp2p demo: one consumer rank (dst, "host" 10.0.0.2) pulls PD blocks from two
source instances on "host" 10.0.0.1: src-a, a pod of 8 ranks (ports 7777-7784), and src-b, an
independent 2-rank instance co-located on the same host. Every node is a real kvp2p node on
127.0.0.1 with real TCP; blocks are written by the "engine", loaded, and verified byte for byte.
At %v src-b/0 crashes; at %v src-a fails partly as in vLLM #56828 (rank 0's connections reset,
ranks 1-7 keep their control connections but their data path goes silent). The same run is
made under each failure policy, side by side. Watch time-to-fallback (ttf) on affected
requests, and false fallbacks: requests whose source never failed but fell back anyway.
`

type demoOpts struct {
	policies []string
	json     bool
	rate     float64
	run      time.Duration // workload length
	settle   time.Duration // after the workload: let every request resolve
	crashAt  time.Duration
	partAt   time.Duration
	blocks   int
	block    int
	quiet    bool
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := demoOpts{}
	pol := fs.String("policy", "all", "domain, per-peer, host-group, or all")
	fs.BoolVar(&o.json, "json", false, "print one JSON report per (scenario, policy)")
	fs.Float64Var(&o.rate, "rate", 20, "requests per second")
	fs.DurationVar(&o.run, "duration", 14*time.Second, "workload length")
	fs.DurationVar(&o.settle, "settle", 36*time.Second, "time after the workload for requests to resolve")
	fs.IntVar(&o.blocks, "blocks", 4, "blocks per request")
	fs.IntVar(&o.block, "block-bytes", 64<<10, "bytes per block")
	scenario := fs.String("scenario", "", "scenario file (design.md §7): not supported yet")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *scenario != "" {
		return fmt.Errorf("--scenario: scenario files are not supported yet (the built-in scenario runs without it)")
	}
	o.crashAt, o.partAt = 3*time.Second, 6*time.Second
	switch *pol {
	case "all":
		o.policies = []string{"per-peer", "host-group", "domain"}
	case "per-peer", "host-group", "domain":
		o.policies = []string{*pol}
	default:
		return fmt.Errorf("--policy %q: want domain, per-peer, host-group or all", *pol)
	}
	if !o.json {
		fmt.Fprintf(stdout, demoIntro, o.crashAt, o.partAt)
		fmt.Fprintf(stdout, "\nrunning %s for %v (+%v to settle)...\n", strings.Join(o.policies, " and "), o.run, o.settle)
	}
	reports := make([]*report, len(o.policies))
	errs := make([]error, len(o.policies))
	var wg sync.WaitGroup
	start := time.Now()
	for i, p := range o.policies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reports[i], errs[i] = runFleet(ctx, p, o)
		}()
	}
	if !o.json {
		go progress(ctx, stdout, start, o, reports, &wg)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		for _, r := range reports {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	fmt.Fprintln(stdout)
	printTable(stdout, reports)
	fmt.Fprint(stdout, `
per-peer is vLLM main: requests to src-a's ranks 1-7 wait out the 30 s PD load timeout.
host-group is vLLM PR #64678: src-a falls back fast, but src-b's healthy rank is taken down
with its host (false fallbacks). domain is kvp2p's: the pod's failure domain turns suspect,
its ranks' data paths are probed, the silent ones are closed within the probe timeout, and the
co-located instance, another domain, is left alone.
`)
	return nil
}

func progress(ctx context.Context, w io.Writer, start time.Time, o demoOpts, _ []*report, wg *sync.WaitGroup) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-t.C:
			el := time.Since(start).Truncate(time.Second)
			phase := "workload"
			switch {
			case el > o.run:
				phase = "settling: waiting for every request to resolve"
			case el > o.partAt:
				phase = "workload; src-b/0 crashed, src-a partly failed"
			case el > o.crashAt:
				phase = "workload; src-b/0 crashed"
			}
			fmt.Fprintf(w, "  t=%-4v %s\n", el, phase)
		}
	}
}

func demoKey(req string, i int) kvp2p.Key {
	h := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", req, i)))
	var k kvp2p.Key
	copy(k[:], h[:])
	return k
}

func demoBlock(k kvp2p.Key, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = k[i%len(k)] ^ byte(i>>3)
	}
	return b
}

// percentile of sorted ms values.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	i := int(p*float64(len(xs)-1) + 0.5)
	return xs[i]
}

func sortedCopy(xs []float64) []float64 {
	c := append([]float64(nil), xs...)
	sort.Float64s(c)
	return c
}
