package demo

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/node"
	"github.com/kvp2p/kvp2p/internal/report"
	"github.com/kvp2p/kvp2p/internal/scenario"
)

// intro is the built-in demo's story, printed before it runs (format:
// the crash's and the partial failure's times).
const intro = `one consumer rank (dst, "host" 10.0.0.2) pulls PD blocks from two
source instances on "host" 10.0.0.1: src-a, a pod of 8 ranks (ports 7777-7784), and src-b, an
independent 2-rank instance co-located on the same host. Every node is a real kvp2p node on
127.0.0.1 with real TCP; blocks are written by the "engine", loaded, and verified byte for byte.
At %v src-b/0 crashes; at %v src-a fails partly as in vLLM #56828 (rank 0's connections reset,
ranks 1-7 keep their control connections but their data path goes silent). The same run is
made under each failure policy, side by side. Watch time-to-fallback (ttf) on affected
requests, and false fallbacks: requests whose source never failed but fell back anyway.
`

// outro explains the built-in demo's table, printed after it.
const outro = `
per-peer is vLLM main: requests to src-a's ranks 1-7 wait out the 30 s PD load timeout.
host-group is vLLM PR #64678: src-a falls back fast, but src-b's healthy rank is taken down
with its host (false fallbacks). domain is kvp2p's: the pod's failure domain turns suspect,
its ranks' data paths are probed, the silent ones are closed within the probe timeout, and the
co-located instance, another domain, is left alone.
`

// Options are kvp2p demo's settings (its flags).
type Options struct {
	Rate       float64       // requests per second per consumer rank; 0: the scenario's (built-in: 20)
	Run        time.Duration // built-in demo: workload length
	Settle     time.Duration // built-in demo: after the workload, let every request resolve
	CrashAt    time.Duration // built-in demo: src-b/0 crashes
	PartAt     time.Duration // built-in demo: src-a fails partly
	Blocks     int           // built-in demo: blocks per request
	BlockBytes int           // bytes per block; 0: the scenario's (built-in: 64 KiB)
	StatusAddr string        // serve each run's consumer status here (policy i: port + i)
	TLS        bool          // mutual TLS between the ranks (tls.go)
	Serial     bool          // policies one after another even when memory allows side by side
	JSON       bool          // stdout: one JSON report a line and nothing else
	Wide       bool          // every column of the report, and the harness's figures (PrintStats)
}

// BuiltinScenario is the built-in demo as a scenario: a src-b/0 crash,
// then vLLM #56828's partial pod failure, on one consumer rank.
func BuiltinScenario(o Options) *scenario.Scenario {
	if o.Rate == 0 {
		o.Rate = 20
	}
	if o.BlockBytes == 0 {
		o.BlockBytes = 64 << 10
	}
	t := func(pod string, a, b int) scenario.Target { return scenario.Target{Pod: pod, First: a, Last: b} }
	return &scenario.Scenario{
		Name: "crash+pod-partial", Duration: o.Run + o.Settle, Seed: 1,
		Pods: []scenario.Pod{
			{Name: "src-a", Host: "10.0.0.1", Ranks: 8, BasePort: 7777, Domain: "pod-a"},
			{Name: "src-b", Host: "10.0.0.1", Ranks: 2, BasePort: 8777, Domain: "pod-b"},
			{Name: "dst", Host: "10.0.0.2", Ranks: 1, BasePort: 7777},
		},
		Workload: scenario.Workload{Mode: scenario.ModePD, Rate: o.Rate, Blocks: o.Blocks, BlockBytes: o.BlockBytes,
			Sources: []string{"src-a", "src-b"}, Consumers: []string{"dst"}, Stop: o.Run},
		Faults: []scenario.Fault{
			{At: o.CrashAt, Kind: scenario.Crash, Target: t("src-b", 0, 0)},
			{At: o.PartAt, Kind: scenario.CloseControl, Target: t("src-a", 0, 0)},
			{At: o.PartAt, Kind: scenario.BlackholeData, Target: t("src-a", 1, 7)},
		},
	}
}

// BuiltinPolicies are the policies the built-in demo compares.
func BuiltinPolicies() []string { return []string{health.PerPeer, health.HostGroup, health.Domain} }

// Execute is kvp2p demo once its flags are read: it runs each scenario
// under each policy on real sockets (side by side when memory allows),
// printing progress, and then docs/design.md §7's table and the harness's
// figures (stdout; under JSON one report a line on stdout, the rest on
// stderr). builtin: scs is the built-in demo (BuiltinScenario), whose
// story is told around the table. It returns the runs, for --svg.
func Execute(ctx context.Context, scs []*scenario.Scenario, builtin bool, policies []string, o Options, stdout, stderr io.Writer) ([]report.Run, error) {
	if !builtin && o.Rate > 0 {
		for _, sc := range scs {
			sc.Workload.Rate = o.Rate
		}
	}
	asJSON := o.JSON
	if builtin {
		// Part 1, a fleet sharing prefixes with no router; its text is
		// human, so under --json it goes to stderr.
		human := stdout
		if asJSON {
			human = stderr
		}
		if err := runFindPart(ctx, human); err != nil {
			return nil, err
		}
	}
	if builtin && !asJSON {
		fmt.Fprint(stdout, "\npart 2, failures: ")
		fmt.Fprintf(stdout, intro, o.CrashAt, o.PartAt)
		fmt.Fprintf(stdout, "\nrunning %s for %v (+%v to settle)...\n", strings.Join(policies, " and "), o.Run, o.Settle)
	}
	rep := report.NewCollector(stdout, asJSON)
	var all []Result
	for _, sc := range scs {
		bb := o.BlockBytes
		if builtin || bb == 0 {
			bb = sc.Workload.BlockBytes
		}
		par := !o.Serial && len(policies)*MemEstimate(sc, bb) <= memBudget
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
		got, err := runPolicies(ctx, sc, policies, bb, par, human, builtin && !asJSON, o)
		if err != nil {
			return nil, err
		}
		for _, r := range got {
			if err := rep.Add(r.Run); err != nil {
				return nil, err
			}
		}
		all = append(all, got...)
	}
	if !asJSON {
		fmt.Fprintln(stdout)
		if o.Wide {
			rep.Table()
		} else {
			rep.NarrowTable()
		}
		fmt.Fprintln(stdout)
		rep.Legend(!o.Wide)
		if o.Wide {
			PrintStats(stdout, all)
		} else {
			fmt.Fprintln(stdout, "(--wide: every column, and the harness's own figures: time to hit, cpu wait, loop lateness, read-back)")
		}
		if builtin {
			fmt.Fprint(stdout, outro)
		}
	}
	return rep.Runs(), nil
}

// runFindPart runs and prints the built-in demo's first part (find.go).
func runFindPart(ctx context.Context, w io.Writer) error {
	o := FindOptions{}.withDefaults()
	fmt.Fprintf(w, "kvp2p demo\n\n"+findIntro, o.Nodes, o.Interval, o.Requests, o.Prefix, o.Docs, o.Own)
	r, err := RunFind(ctx, o)
	if err != nil {
		return fmt.Errorf("find part: %w", err)
	}
	r.Print(w)
	return nil
}

// memBudget bounds what the fleets running side by side may hold in
// their arenas; over it the policies run one after another.
const memBudget = 14 << 30

// runPolicies runs sc under each policy, side by side when parallel,
// printing progress to stdout (the built-in demo's phases when phases).
func runPolicies(ctx context.Context, sc *scenario.Scenario, policies []string, bb int, parallel bool, stdout io.Writer, phases bool, o Options) ([]Result, error) {
	runs := make([]Result, len(policies))
	errs := make([]error, len(policies))
	var mu sync.Mutex
	live := map[string]*Run{}
	consumer := map[string]*node.Node{} // each run's first consumer, for --metrics-addr
	track := func(p string) func(*Run) {
		return func(r *Run) {
			mu.Lock()
			defer mu.Unlock()
			live[p] = r // a finished Run holds no node (RunScenario drops them)
			if o.StatusAddr != "" {
				// Only then: the node and its arena stay reachable until
				// every policy ran, gigabytes when they run one after another.
				consumer[p] = r.FirstConsumer()
			}
		}
	}
	if o.StatusAddr != "" {
		stop, err := ServeStatus(o.StatusAddr, policies, func(p string) *node.Node {
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
		progress(ctx, stdout, done, phases, o, sc, policies, func(p string) *Run {
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
				runs[i], errs[i] = RunScenario(ctx, sc, p, bb, o.TLS, track(p))
			}()
		}
		wg.Wait()
	} else {
		for i, p := range policies {
			if runs[i], errs[i] = RunScenario(ctx, sc, p, bb, o.TLS, track(p)); errs[i] != nil {
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

// progress reports the runs while they go on, on one line (progressLine):
// the built-in demo's phase, or a scenario's requests resolved per policy.
func progress(ctx context.Context, w io.Writer, done <-chan struct{}, phases bool, o Options, sc *scenario.Scenario, policies []string, run func(string) *Run) {
	line := newProgressLine(w)
	defer line.end()
	start := time.Now()
	t := time.NewTicker(time.Second)
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
			p := phaseAt(el, o)
			line.update(el, p, p)
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
			line.update(el, "", strings.Join(parts, ", "))
		}
	}
}

// phaseAt is what the built-in demo is doing el into its run.
func phaseAt(el time.Duration, o Options) string {
	switch {
	case el > o.Run:
		return "settling: waiting for every request to resolve"
	case el > o.PartAt:
		return "workload; src-b/0 crashed, src-a partly failed"
	case el > o.CrashAt:
		return "workload; src-b/0 crashed"
	}
	return "workload"
}
