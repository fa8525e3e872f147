package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/kvp2p/kvp2p/internal/chart"
	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/lab"
	"github.com/kvp2p/kvp2p/internal/scenario"
)

const labUsage = `usage: sudo kvp2p lab [--scenario FILE|NAME|all] [--policy NAME|all] [--json] [--keep] [--clean]

The fault lab: real kvp2p serve processes, one per rank, on network hosts
made with Linux network namespaces (one per scenario host, 10.200.0.0/16,
joined by a bridge in a namespace of its own; nothing is made in the
machine's own namespace). A driver plays every rank's engine through the
engine API, and the scenario's faults are made by the kernel:

  crash           SIGKILL of the rank's process (a heal starts it again)
  restart         SIGKILL, then a new process: a new incarnation, empty
  stall           SIGSTOP ... SIGCONT at the heal: sockets open, nothing answers
  blackhole       nftables drops every packet to and from the rank's port
  blackhole-data  nftables drops the rank's data connections only (marked by
                  conntrack from their first frame, DataAttach); control stays up
  close-control   ss -K: the kernel aborts the rank's connections and sends RSTs
  slow            a tbf qdisc at bytes_per_sec on the host's link, for the
                  rank's port (htb class + u32 filter); send buffers fill behind it
  goodbye-idle    SIGUSR1 to the rank's serve: every session ends with Goodbye(idle)
  refuse-handshake SIGUSR2 (toggle) to the rank's serve: new handshakes refused as
                  incompatible; SIGUSR2 again at the heal (the lab waits for the
                  serve's log line each time)
  delay           not made: the lab has no delay fault (it would need the netem
                  qdisc); a scenario with one is refused with the reason

Prints the report of docs/design.md §7 per (scenario, policy). Needs root, ip, nft, tc
and ss (apt-get install -y iproute2 nftables). Everything is removed at the
end, on Ctrl-C, and at the next start if a lab died.
`

// runLab is `kvp2p lab`: its flags, and holding the lab while it runs;
// the runs and their report are internal/lab's (lab.Execute).
func runLab(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, common := newRunFlags("lab", labUsage, "pod-partial", "or all", stderr)
	keep := fs.Bool("keep", false, "leave the last run's namespaces and processes up, and print how to clean up")
	clean := fs.Bool("clean", false, "remove what a lab left (namespaces kvp2plab-*, their processes, "+lab.StateDir+", "+lab.RegionDir+") and exit")
	logLevel := fs.String("log-level", "info", "the processes' log level (their logs are in "+lab.StateDir+"/run-*/; a run with false fallbacks keeps them under "+lab.EvidenceDir+")")
	reqPath := fs.String("requests", "", "write every request's record (one JSON object a line) to this `file`, to see which requests made a figure")
	soak := fs.Duration("soak", 0, "run a soak this long instead (e.g. 10m): mixed workload, random faults of every kind the lab makes, checked as it runs; exits non-zero on a violation")
	seed := fs.Int64("seed", 1, "--soak: the seed of its fault timeline")
	blockBytes := fs.Int("block-bytes", 0, "bytes per block (default: the scenario's); a smaller value scales a scenario down")
	if err := parseRunArgs(fs, args); err != nil {
		return err
	}
	if *blockBytes < 0 {
		return fmt.Errorf("--block-bytes: must be positive")
	}
	if err := lab.Check(); err != nil {
		return err
	}
	if *clean {
		l, err := lab.Acquire() // cleans
		if err != nil {
			return err
		}
		l.Release()
		fmt.Fprintln(stdout, "kvp2p lab: nothing of a lab is left")
		return nil
	}
	if *soak > 0 {
		return lab.RunSoak(ctx, *soak, *seed, common.policy, lab.SoakFlags{LogLevel: *logLevel, ReqPath: *reqPath, Keep: *keep}, stdout)
	}
	scs, err := scenario.Select(common.scenario)
	if err != nil {
		return err
	}
	runnable, err := lab.Runnable(scs, common.scenario != "all", stderr)
	if err != nil {
		return err
	}
	policies, err := common.pickPolicies(health.Names())
	if err != nil {
		return err
	}
	if err := common.checkSVG(runnable); err != nil {
		return err
	}
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	l, err := lab.Acquire()
	if err != nil {
		return err
	}
	defer l.Release()
	out := lab.Output{JSON: common.json, Keep: *keep}
	if *reqPath != "" {
		f, err := os.Create(*reqPath)
		if err != nil {
			return err
		}
		defer f.Close()
		out.Requests = f
	}
	runs, err := lab.Execute(ctx, runnable, policies, lab.Options{Bin: bin, BlockBytes: *blockBytes, LogLevel: *logLevel}, out, stdout)
	if err != nil {
		return err
	}
	return chart.WriteFile(common.svg, runnable[0], runs)
}
