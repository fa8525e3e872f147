package main

import (
	"context"
	"fmt"
	"io"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/report"
	"github.com/kvp2p/kvp2p/internal/sim"
)

const simUsage = `usage: kvp2p sim [--scenario FILE|NAME|all] [--policy NAME|all] [--seed N]
                 [--timers preset|vllm|kvp2p] [--drop-domains] [--ablation] [--json] [--svg FILE]

Runs each scenario under each failure policy in the simulator (virtual time,
deterministic for a seed) and prints design.md §7's report.

--timers runs every policy with one timer set instead of its preset (per-peer
and host-group: vllm, which also models vLLM's transport; domain: kvp2p).
--drop-domains removes every pod's failure-domain label from the nodes.
--ablation runs each policy under both timer sets, and domain also without
domains, and prints the matrix: what the watchdog and the timers give (the
timers column), and what failure domains give (the domains column).
`

// variant is one (timer set, domains) a policy runs with.
type variant struct {
	timers  string // "" : the policy's preset
	dropped bool
}

// runSim is `kvp2p sim`.
func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
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
	scs, err := loadScenarios(common.scenario)
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
	rep := common.report(stdout)
	for _, sc := range scs {
		for _, p := range policies {
			for _, v := range variants(p, *ablation, variant{*timers, *drop}) {
				if err := ctx.Err(); err != nil {
					return err
				}
				res, err := sim.Run(sc, p, sim.Options{Seed: *seed, TimerSet: v.timers, DropDomains: v.dropped})
				if err != nil {
					return fmt.Errorf("%s under %s: %w", sc.Name, p, err)
				}
				if err := rep.add(report.Run{Policy: p, Requests: res.Requests, Report: res.Report}); err != nil {
					return err
				}
			}
		}
	}
	switch {
	case common.json:
	case *ablation:
		report.AblationTable(stdout, rep.reps)
	default:
		rep.table()
	}
	return rep.writeSVG(common.svg, scs[0])
}

// variants is what policy p runs with: one, or the ablation's matrix (both
// timer sets; domain also with its domains dropped, which changes nothing
// for the policies that ignore domains).
func variants(p string, ablation bool, one variant) []variant {
	if !ablation {
		return []variant{one}
	}
	vs := []variant{{timers: sim.TimersVLLM}, {timers: sim.TimersKVP2P}}
	if p == health.Domain {
		vs = append(vs, variant{sim.TimersVLLM, true}, variant{sim.TimersKVP2P, true})
	}
	return vs
}
