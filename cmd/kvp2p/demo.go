package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"time"

	"github.com/kvp2p/kvp2p/internal/chart"
	"github.com/kvp2p/kvp2p/internal/demo"
	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/scenario"
)

const demoUsage = `usage: kvp2p demo [--scenario FILE|NAME|all] [--policy NAME|all] [--wide] [--json] [--svg FILE]

Runs a fleet of real kvp2p nodes on 127.0.0.1 (real TCP; blocks written,
loaded and checked byte for byte) with injected faults, under each failure
policy, and prints the report of docs/design.md §7 with a legend of its
columns (--wide: every column, and the harness's own figures).

Without --scenario it runs the built-in demo (about 50 s), in two parts.
First, a fleet with no router: 4 nodes with find on get requests
round-robin, naming no source, and load shared prefixes from the peers
their summaries name; the blocks loaded are compared with what an oracle
that knows every cache would have loaded. Then failures: a source pod
src-a of 8 ranks and an independent 2-rank instance src-b on the same host,
and one consumer; src-b/0 crashes, then src-a fails partly (rank 0's
connections reset, ranks 1-7 keep their control connections but their data
path goes silent), under per-peer, host-group and domain side by side.
With --scenario it runs scenario files or built-in names (the ones kvp2p
sim runs) on wall time, with faults injected at the frame level.
`

// runDemo is `kvp2p demo`: its flags; the runs and their report are
// internal/demo's (demo.Execute).
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) (retErr error) {
	fs, common := newRunFlags("demo", demoUsage, "", "or all; empty: the built-in demo", stderr)
	o := demo.Options{CrashAt: 3 * time.Second, PartAt: 6 * time.Second}
	fs.BoolVar(&o.Serial, "serial", false, "run the policies one after another (default: side by side unless memory is short)")
	fs.Float64Var(&o.Rate, "rate", 0, "requests per second per consumer rank (default: the scenario's; 20 for the built-in demo)")
	fs.IntVar(&o.BlockBytes, "block-bytes", 0, "bytes per block (default: the scenario's; 65536 for the built-in demo); a smaller value scales a scenario down for a small machine")
	fs.DurationVar(&o.Run, "duration", 14*time.Second, "built-in demo: workload length")
	fs.DurationVar(&o.Settle, "settle", 32*time.Second, "built-in demo: time after the workload for requests to resolve")
	fs.IntVar(&o.Blocks, "blocks", 4, "built-in demo: blocks per request")
	fs.StringVar(&o.StatusAddr, "metrics-addr", "", "serve each policy's first consumer's /metrics, status page and /status.json on `host:port` (policy i on port + i) while it runs")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof)")
	traceFile := fs.String("trace", "", "write an execution trace of the run to this file (go tool trace)")
	fs.BoolVar(&o.Wide, "wide", false, "print every column of the report, and the harness's own figures (time to hit, cpu wait, loop lateness, read-back)")
	fs.BoolVar(&o.TLS, "tls", false, "mutual TLS between the ranks (a throwaway CA and certificates made in process)")
	if err := parseRunArgs(fs, args); err != nil {
		return err
	}
	if o.Rate < 0 || o.BlockBytes < 0 || o.Blocks <= 0 || o.Run <= 0 || o.Settle < 0 {
		return fmt.Errorf("--rate, --block-bytes, --blocks, --duration, --settle: must be positive")
	}
	o.JSON = common.json
	builtin := common.scenario == ""
	var scs []*scenario.Scenario
	policies := health.Names()
	if builtin {
		scs, policies = []*scenario.Scenario{demo.BuiltinScenario(o)}, demo.BuiltinPolicies()
	} else {
		var err error
		if scs, err = scenario.Select(common.scenario); err != nil {
			return err
		}
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
	stopProf, err := demo.StartProfiles(*cpuProfile, *traceFile)
	if err != nil {
		return err
	}
	defer func() {
		if err := stopProf(); err != nil && retErr == nil {
			retErr = err
		}
	}()
	runs, err := demo.Execute(ctx, scs, builtin, policies, o, stdout, stderr)
	if err != nil {
		return err
	}
	return chart.WriteFile(common.svg, scs[0], runs)
}
