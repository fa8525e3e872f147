package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/scenario"
)

// What kvp2p sim, demo and lab share: the scenario and policy flags, and
// the SVG file of their (scenario, policy) runs.

// runFlags are the flags of a command that runs scenarios under policies.
type runFlags struct {
	scenario string
	policy   string
	json     bool
	svg      string
}

// newRunFlags makes the command's flag set, whose usage prints usage then
// the flags, with --scenario (default defScenario, help ending in
// allHelp), --policy, --json and --svg on it.
func newRunFlags(name, usage, defScenario, allHelp string, stderr io.Writer) (*flag.FlagSet, *runFlags) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage+"\nflags:\n")
		fs.PrintDefaults()
	}
	common := &runFlags{}
	fs.StringVar(&common.scenario, "scenario", defScenario, "a scenario file, a built-in name ("+strings.Join(scenario.Builtins(), ", ")+"), "+allHelp)
	fs.StringVar(&common.policy, "policy", "all", strings.Join(health.Names(), ", ")+", or all")
	fs.BoolVar(&common.json, "json", false, "print one JSON report per (scenario, policy)")
	fs.StringVar(&common.svg, "svg", "", "write a timeline of the runs to this SVG file (one scenario only)")
	return fs, common
}

// parseRunArgs parses args; the flag package has printed what is wrong
// (errReported), and no positional argument is taken.
func parseRunArgs(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errReported
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return nil
}

// pickPolicies is every one of policies for "all", else the one named.
func (f *runFlags) pickPolicies(policies []string) ([]string, error) {
	if f.policy == "all" {
		return policies, nil
	}
	if !slices.Contains(policies, f.policy) {
		return nil, fmt.Errorf("--policy %q: want %s or all", f.policy, strings.Join(policies, ", "))
	}
	return []string{f.policy}, nil
}

// checkSVG rejects --svg for more than one scenario.
func (f *runFlags) checkSVG(scs []*scenario.Scenario) error {
	if f.svg != "" && len(scs) != 1 {
		return fmt.Errorf("--svg draws one scenario; name it with --scenario")
	}
	return nil
}
