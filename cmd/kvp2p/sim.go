package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

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
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, simUsage)
		fs.PrintDefaults()
	}
	scen := fs.String("scenario", "all", "a scenario file, a built-in name ("+strings.Join(scenario.Builtins(), ", ")+"), or all")
	pol := fs.String("policy", "all", strings.Join(health.Names(), ", ")+", or all")
	seed := fs.Int64("seed", 0, "random seed (0: each scenario's own)")
	asJSON := fs.Bool("json", false, "print one JSON report per (scenario, policy)")
	svg := fs.String("svg", "", "write a timeline of the runs to this SVG file (one scenario only)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errReported
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var scs []*scenario.Scenario
	if *scen == "all" {
		all, err := scenario.LoadAll()
		if err != nil {
			return err
		}
		scs = all
	} else {
		sc, err := scenario.Load(*scen)
		if err != nil {
			return err
		}
		scs = []*scenario.Scenario{sc}
	}
	policies := health.Names()
	if *pol != "all" {
		if !slices.Contains(policies, *pol) {
			return fmt.Errorf("--policy %q: want %s or all", *pol, strings.Join(policies, ", "))
		}
		policies = []string{*pol}
	}
	if *svg != "" && len(scs) != 1 {
		return fmt.Errorf("--svg draws one scenario; name it with --scenario")
	}
	var reps []scenario.Report
	var runs []scenario.Run
	for _, sc := range scs {
		for _, p := range policies {
			if err := ctx.Err(); err != nil {
				return err
			}
			res, err := sim.Run(sc, p, sim.Options{Seed: *seed})
			if err != nil {
				return fmt.Errorf("%s under %s: %w", sc.Name, p, err)
			}
			reps = append(reps, res.Report)
			runs = append(runs, scenario.Run{Policy: p, Requests: res.Requests, Report: res.Report})
			if *asJSON {
				b, err := res.Report.JSON()
				if err != nil {
					return err
				}
				fmt.Fprintf(stdout, "%s\n", b)
			}
		}
	}
	if !*asJSON {
		scenario.Table(stdout, reps)
	}
	if *svg != "" {
		return writeSVG(*svg, scs[0], runs)
	}
	return nil
}

func writeSVG(path string, sc *scenario.Scenario, runs []scenario.Run) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := scenario.SVG(f, sc, runs); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
