package main

import (
	"context"
	"fmt"
	"io"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/scenario"
	"github.com/kvp2p/kvp2p/internal/sim"
)

const simUsage = `usage: kvp2p sim [--scenario FILE|NAME|all] [--policy NAME|all] [--seed N] [--json] [--svg FILE]

Runs each scenario under each failure policy in the simulator (virtual time,
deterministic for a seed) and prints design.md §7's report.
`

// runSim is `kvp2p sim`.
func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, rf := newRunFlags("sim", simUsage, "all", "or all", stderr)
	seed := fs.Int64("seed", 0, "random seed (0: each scenario's own)")
	if err := parseRunArgs(fs, args); err != nil {
		return err
	}
	scs, err := loadScenarios(rf.scenario)
	if err != nil {
		return err
	}
	policies, err := rf.pickPolicies(health.Names())
	if err != nil {
		return err
	}
	if err := rf.checkSVG(scs); err != nil {
		return err
	}
	rep := rf.report(stdout)
	for _, sc := range scs {
		for _, p := range policies {
			if err := ctx.Err(); err != nil {
				return err
			}
			res, err := sim.Run(sc, p, sim.Options{Seed: *seed})
			if err != nil {
				return fmt.Errorf("%s under %s: %w", sc.Name, p, err)
			}
			if err := rep.add(scenario.Run{Policy: p, Requests: res.Requests, Report: res.Report}); err != nil {
				return err
			}
		}
	}
	if !rf.json {
		rep.table()
	}
	return rep.writeSVG(rf.svg, scs[0])
}
