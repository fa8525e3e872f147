package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/kvp2p/kvp2p"
	"github.com/kvp2p/kvp2p/internal/demo"
	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/scenario"
)

const demoUsage = `usage: kvp2p demo [--scenario FILE|NAME|all] [--policy NAME|all] [--json] [--svg FILE]

Runs a fleet of real kvp2p nodes on 127.0.0.1 (real TCP, real blocks
written, loaded and checked byte for byte) with injected faults, under each
failure policy, and prints design.md §7's report. Without --scenario it runs
the built-in demo below; with it, scenario files (design.md §7, the same
files kvp2p sim runs) on wall time.
`

const demoIntro = `kvp2p demo: one consumer rank (dst, "host" 10.0.0.2) pulls PD blocks from two
source instances on "host" 10.0.0.1: src-a, a pod of 8 ranks (ports 7777-7784), and src-b, an
independent 2-rank instance co-located on the same host. Every node is a real kvp2p node on
127.0.0.1 with real TCP; blocks are written by the "engine", loaded, and verified byte for byte.
At %v src-b/0 crashes; at %v src-a fails partly as in vLLM #56828 (rank 0's connections reset,
ranks 1-7 keep their control connections but their data path goes silent). The same run is
made under each failure policy, side by side. Watch time-to-fallback (ttf) on affected
requests, and false fallbacks: requests whose source never failed but fell back anyway.
`

const demoOutro = `
per-peer is vLLM main: requests to src-a's ranks 1-7 wait out the 30 s PD load timeout.
host-group is vLLM PR #64678: src-a falls back fast, but src-b's healthy rank is taken down
with its host (false fallbacks). domain is kvp2p's: the pod's failure domain turns suspect,
its ranks' data paths are probed, the silent ones are closed within the probe timeout, and the
co-located instance, another domain, is left alone.
`

type demoOpts struct {
	rate       float64
	run        time.Duration // workload length
	settle     time.Duration // after the workload: let every request resolve
	crashAt    time.Duration
	partAt     time.Duration
	blocks     int
	blockBytes int
	statusAddr string // serve each run's consumer status here (policy i: port + i)
	tls        bool   // mutual TLS between the ranks (internal/demo/tls.go)
}

// defaultDemoScenario is the built-in demo as a scenario: a src-b/0 crash,
// then vLLM #56828's partial pod failure, on one consumer rank.
func defaultDemoScenario(o demoOpts) *scenario.Scenario {
	t := func(pod string, a, b int) scenario.Target { return scenario.Target{Pod: pod, First: a, Last: b} }
	return &scenario.Scenario{
		Name: "crash+pod-partial", Duration: o.run + o.settle, Seed: 1,
		Pods: []scenario.Pod{
			{Name: "src-a", Host: "10.0.0.1", Ranks: 8, BasePort: 7777, Domain: "pod-a"},
			{Name: "src-b", Host: "10.0.0.1", Ranks: 2, BasePort: 8777, Domain: "pod-b"},
			{Name: "dst", Host: "10.0.0.2", Ranks: 1, BasePort: 7777},
		},
		Workload: scenario.Workload{Mode: scenario.ModePD, Rate: o.rate, Blocks: o.blocks, BlockBytes: o.blockBytes,
			Sources: []string{"src-a", "src-b"}, Consumers: []string{"dst"}, Stop: o.run},
		Faults: []scenario.Fault{
			{At: o.crashAt, Kind: scenario.Crash, Target: t("src-b", 0, 0)},
			{At: o.partAt, Kind: scenario.CloseControl, Target: t("src-a", 0, 0)},
			{At: o.partAt, Kind: scenario.BlackholeData, Target: t("src-a", 1, 7)},
		},
	}
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) (retErr error) {
	fs, common := newRunFlags("demo", demoUsage, "", "or all; empty: the built-in demo", stderr)
	o := demoOpts{crashAt: 3 * time.Second, partAt: 6 * time.Second}
	serial := fs.Bool("serial", false, "run the policies one after another (default: side by side unless memory is short)")
	fs.Float64Var(&o.rate, "rate", 0, "requests per second per consumer rank (default: the scenario's; 20 for the built-in demo)")
	fs.IntVar(&o.blockBytes, "block-bytes", 0, "bytes per block (default: the scenario's; 65536 for the built-in demo); a smaller value scales a scenario down for a small machine")
	fs.DurationVar(&o.run, "duration", 14*time.Second, "built-in demo: workload length")
	fs.DurationVar(&o.settle, "settle", 32*time.Second, "built-in demo: time after the workload for requests to resolve")
	fs.IntVar(&o.blocks, "blocks", 4, "built-in demo: blocks per request")
	fs.StringVar(&o.statusAddr, "metrics-addr", "", "serve each policy's first consumer's /metrics, status page and /status.json on `host:port` (policy i on port + i) while it runs")
	var prof profileFlags
	prof.register(fs)
	fs.BoolVar(&o.tls, "tls", false, "mutual TLS between the ranks (a throwaway CA and certificates made in process)")
	if err := parseRunArgs(fs, args); err != nil {
		return err
	}
	if o.rate < 0 || o.blockBytes < 0 || o.blocks <= 0 || o.run <= 0 || o.settle < 0 {
		return fmt.Errorf("--rate, --block-bytes, --blocks, --duration, --settle: must be positive")
	}
	builtin := common.scenario == ""
	var scs []*scenario.Scenario
	if builtin {
		d := o
		if d.rate == 0 {
			d.rate = 20
		}
		if d.blockBytes == 0 {
			d.blockBytes = 64 << 10
		}
		scs = []*scenario.Scenario{defaultDemoScenario(d)}
	} else {
		var err error
		if scs, err = loadScenarios(common.scenario); err != nil {
			return err
		}
	}
	if !builtin && o.rate > 0 {
		for _, sc := range scs {
			sc.Workload.Rate = o.rate
		}
	}
	policies := health.Names()
	if builtin {
		policies = []string{health.PerPeer, health.HostGroup, health.Domain}
	}
	policies, err := common.pickPolicies(policies)
	if err != nil {
		return err
	}
	if err := common.checkSVG(scs); err != nil {
		return err
	}
	// The arenas are large, live and pointer-free; without a lower GC
	// target the garbage of the checks could grow as large as they are.
	if os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(25))
	}
	stopProf, err := prof.start()
	if err != nil {
		return err
	}
	defer func() {
		if err := stopProf(); err != nil && retErr == nil {
			retErr = err
		}
	}()
	asJSON := common.json
	if builtin && !asJSON {
		fmt.Fprintf(stdout, demoIntro, o.crashAt, o.partAt)
		fmt.Fprintf(stdout, "\nrunning %s for %v (+%v to settle)...\n", strings.Join(policies, " and "), o.run, o.settle)
	}
	rep := common.report(stdout)
	var all []demo.Result
	for _, sc := range scs {
		bb := o.blockBytes
		if builtin || bb == 0 {
			bb = sc.Workload.BlockBytes
		}
		par := !*serial && len(policies)*demo.MemEstimate(sc, bb) <= demoMemBudget
		if !builtin && !asJSON {
			how := ""
			switch {
			case len(policies) == 1:
			case par:
				how = " side by side"
			default:
				how = " one after another"
			}
			fmt.Fprintf(stdout, "%s: %v on real sockets, %s%s...\n", sc.Name, sc.Duration, strings.Join(policies, ", "), how)
		}
		// Progress and other human text: stdout, but stderr under --json,
		// whose stdout is one JSON object per line and nothing else.
		human := stdout
		if asJSON {
			human = stderr
		}
		got, err := runDemoPolicies(ctx, sc, policies, bb, par, human, builtin && !asJSON, o)
		if err != nil {
			return err
		}
		for _, r := range got {
			if err := rep.add(r.Run); err != nil {
				return err
			}
		}
		all = append(all, got...)
	}
	if !asJSON {
		fmt.Fprintln(stdout)
		rep.table()
		demo.PrintStats(stdout, all)
		if builtin {
			fmt.Fprint(stdout, demoOutro)
		}
	}
	return rep.writeSVG(common.svg, scs[0])
}

// demoMemBudget bounds what the fleets running side by side may hold in
// their arenas; over it the policies run one after another.
const demoMemBudget = 14 << 30

func runDemoPolicies(ctx context.Context, sc *scenario.Scenario, policies []string, bb int, parallel bool, stdout io.Writer, phases bool, o demoOpts) ([]demo.Result, error) {
	runs := make([]demo.Result, len(policies))
	errs := make([]error, len(policies))
	var mu sync.Mutex
	live := map[string]*demo.Run{}
	consumer := map[string]*kvp2p.Node{} // each run's first consumer, for --metrics-addr
	track := func(p string) func(*demo.Run) {
		return func(r *demo.Run) {
			mu.Lock()
			defer mu.Unlock()
			live[p] = r // a finished Run holds no node (demo.RunScenario drops them)
			if o.statusAddr != "" {
				// Only then: the node and its arena stay reachable until
				// every policy ran, gigabytes when they run one after another.
				consumer[p] = r.FirstConsumer()
			}
		}
	}
	if o.statusAddr != "" {
		stop, err := startDemoStatus(o.statusAddr, policies, func(p string) *kvp2p.Node {
			mu.Lock()
			defer mu.Unlock()
			return consumer[p]
		}, stdout)
		if err != nil {
			return nil, err
		}
		defer stop()
	}
	done := make(chan struct{})
	var pw sync.WaitGroup
	pw.Add(1)
	go func() {
		defer pw.Done()
		demoProgress(ctx, stdout, done, phases, o, sc, policies, func(p string) *demo.Run {
			mu.Lock()
			defer mu.Unlock()
			return live[p]
		})
	}()
	if parallel {
		var wg sync.WaitGroup
		for i, p := range policies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runs[i], errs[i] = demo.RunScenario(ctx, sc, p, bb, o.tls, track(p))
			}()
		}
		wg.Wait()
	} else {
		for i, p := range policies {
			if runs[i], errs[i] = demo.RunScenario(ctx, sc, p, bb, o.tls, track(p)); errs[i] != nil {
				break
			}
		}
	}
	close(done)
	pw.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("%s under %s: %w", sc.Name, policies[i], err)
		}
	}
	return runs, nil
}

// demoProgress prints a line every few seconds while the runs go on: the
// built-in demo's phases, or a scenario's request counts per policy.
func demoProgress(ctx context.Context, w io.Writer, done <-chan struct{}, phases bool, o demoOpts, sc *scenario.Scenario, policies []string, run func(string) *demo.Run) {
	every := 5 * time.Second
	if phases {
		every = 2 * time.Second
	}
	start := time.Now()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		el := time.Since(start).Truncate(time.Second)
		if phases {
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
			continue
		}
		var parts []string
		for _, p := range policies {
			if r := run(p); r != nil {
				res, req := r.Progress()
				parts = append(parts, fmt.Sprintf("%s %d/%d resolved", p, res, req))
			}
		}
		if len(parts) > 0 {
			fmt.Fprintf(w, "  t=%-4v %s\n", el, strings.Join(parts, ", "))
		}
	}
}
