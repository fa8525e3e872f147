package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/kvp2p/kvp2p/internal/prefixsim"
)

const simFindUsage = `usage: kvp2p sim find [--pods N] [--chunks N] [--requests N] [--seed N]

Simulates a fleet behind a round-robin balancer whose nodes find each
other's prefixes from summaries alone (no router names a source), against an
oracle that knows every cache, and prints the share of the oracle's
loadable tokens found, the summaries' traffic and their memory per rank.
Deterministic for a seed. The defaults are docs/evaluation.md's run.
`

// runSimFind is `kvp2p sim find`.
func runSimFind(args []string, stdout, stderr io.Writer) error {
	d := prefixsim.Default()
	fs := flag.NewFlagSet("sim find", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, simFindUsage+"\nflags:\n")
		fs.PrintDefaults()
	}
	fs.IntVar(&d.Pods, "pods", d.Pods, "pods behind the balancer")
	fs.IntVar(&d.ChunksPerRank, "chunks", d.ChunksPerRank, "a rank's CPU tier, in blocks")
	fs.IntVar(&d.Requests, "requests", d.Requests, "requests in the run")
	fs.Uint64Var(&d.Seed, "seed", d.Seed, "random seed")
	fs.DurationVar(&d.Interval, "interval", d.Interval, "how often a node flushes its summary delta")
	if err := parseRunArgs(fs, args); err != nil {
		return err
	}
	r, err := prefixsim.Run(d)
	if err != nil {
		return err
	}
	r.Print(stdout)
	return nil
}
