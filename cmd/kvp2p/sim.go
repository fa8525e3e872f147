package main

import (
	"context"
	"fmt"
	"io"

	"github.com/kvp2p/kvp2p/internal/chart"
	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/report"
	"github.com/kvp2p/kvp2p/internal/scenario"
	"github.com/kvp2p/kvp2p/internal/sim"
)

const simUsage = `usage: kvp2p sim [--scenario FILE|NAME|all] [--policy NAME|all] [--seed N]
                 [--timers preset|vllm|kvp2p] [--drop-domains] [--ablation] [--json] [--svg FILE]
       kvp2p sim find [flags]   (finding prefixes without a router: kvp2p sim find --help)

Runs each scenario under each failure policy in the simulator (virtual time,
deterministic for a seed) and prints the report of docs/design.md §7.

--timers runs every policy with one timer set instead of its preset (per-peer
and host-group: vllm, which also models vLLM's transport; domain: kvp2p).
--drop-domains removes every pod's failure-domain label from the nodes.
--ablation runs each policy under both timer sets, and domain also without
domains, and prints the matrix: what the watchdog and the timers give (the
timers column), and what failure domains give (the domains column).
`

// runSim is `kvp2p sim`.
func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "find" {
		return runSimFind(args[1:], stdout, stderr)
	}
	fs, common := newRunFlags("sim", simUsage, "all", "or all", stderr)
	seed := fs.Int64("seed", 0, "random seed (0: each scenario's own)")
	timers := fs.String("timers", "preset", "timer set for every policy: preset, "+sim.TimersVLLM+" or "+sim.TimersKVP2P)
	drop := fs.Bool("drop-domains", false, "remove every pod's failure-domain label from the nodes")
	ablation := fs.Bool("ablation", false, "run each policy under both timer sets, and domain without domains too; print the matrix")
	if err := parseRunArgs(fs, args); err != nil {
		return err
	}
	if *timers == "preset" {
		*timers = ""
	}
	if *timers != "" && *timers != sim.TimersVLLM && *timers != sim.TimersKVP2P {
		return fmt.Errorf("--timers %q: want preset, %s or %s", *timers, sim.TimersVLLM, sim.TimersKVP2P)
	}
	if *ablation && (*timers != "" || *drop || common.svg != "") {
		return fmt.Errorf("--ablation runs every timer set and both domain settings itself: no --timers, --drop-domains or --svg")
	}
	scs, err := scenario.Select(common.scenario)
	if err != nil {
		return err
	}
	policies, err := common.pickPolicies(health.Names())
	if err != nil {
		return err
	}
	if err := common.checkSVG(scs); err != nil {
		return err
	}
	rep := report.NewCollector(stdout, common.json)
	m := sim.Matrix{Scenarios: scs, Policies: policies, Seed: *seed, One: sim.Variant{Timers: *timers, DropDomains: *drop}, Ablation: *ablation}
	if err := m.Run(ctx, rep.Add); err != nil {
		return err
	}
	switch {
	case common.json:
	case *ablation:
		rep.AblationTable()
	default:
		rep.Table()
	}
	return chart.WriteFile(common.svg, scs[0], rep.Runs())
}
