package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

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
  delay           refused: netem is not in this machine's kernel

Prints design.md §7's report per (scenario, policy). Needs root, ip, nft, tc
and ss (apt-get install -y iproute2 nftables). Everything is removed at the
end, on Ctrl-C, and at the next start if a lab died.
`

// runLab is `kvp2p lab`.
func runLab(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, common := newRunFlags("lab", labUsage, "pod-partial", "or all", stderr)
	keep := fs.Bool("keep", false, "leave the last run's namespaces and processes up, and print how to clean up")
	clean := fs.Bool("clean", false, "remove what a lab left (namespaces kvp2plab-*, their processes, "+lab.StateDir+", "+lab.RegionDir+") and exit")
	logLevel := fs.String("log-level", "warn", "the processes' log level (their logs are in "+lab.StateDir+"/run-*/)")
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
		return runSoak(ctx, *soak, *seed, common.policy, soakOut{*logLevel, *reqPath, *keep}, stdout)
	}
	scs, err := loadScenarios(common.scenario)
	if err != nil {
		return err
	}
	for _, sc := range scs {
		if err := lab.CheckKinds(sc); err != nil {
			if common.scenario != "all" {
				return err
			}
			fmt.Fprintf(stderr, "kvp2p lab: skipping %v\n", err)
		}
	}
	runnable := scs[:0]
	for _, sc := range scs {
		if lab.CheckKinds(sc) == nil {
			runnable = append(runnable, sc)
		}
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
	var reqOut *json.Encoder
	if *reqPath != "" {
		f, err := os.Create(*reqPath)
		if err != nil {
			return err
		}
		defer f.Close()
		reqOut = json.NewEncoder(f)
	}
	rep := common.report(stdout)
	for i, sc := range runnable {
		for j, p := range policies {
			last := i == len(runnable)-1 && j == len(policies)-1
			if !common.json {
				fmt.Fprintf(stdout, "%s under %s: %v on real processes...\n", sc.Name, p, sc.Duration)
			}
			var progress io.Writer
			if !common.json {
				progress = stdout
			}
			r, err := lab.Run(ctx, sc, p, lab.Options{Bin: bin, BlockBytes: *blockBytes, Keep: *keep && last, Progress: progress, LogLevel: *logLevel})
			if err != nil {
				return fmt.Errorf("%s under %s: %w", sc.Name, p, err)
			}
			if reqOut != nil {
				for _, q := range r.Requests {
					if err := reqOut.Encode(labRequest{sc.Name, p, q}); err != nil {
						return err
					}
				}
			}
			if err := rep.add(r); err != nil {
				return err
			}
		}
	}
	if !common.json {
		fmt.Fprintln(stdout)
		rep.table()
	}
	if *keep && len(runnable) > 0 {
		ns, _ := lab.Namespaces()
		fmt.Fprintf(stdout, "\n--keep: the last run's hosts are up: %s\n"+
			"  poke:     sudo ip netns exec %s ss -tnp   (configs, sockets, logs in %s)\n"+
			"  metrics:  sudo ip netns exec %s curl -s 127.0.0.1:%d/metrics   (rank i of the scenario: port %d+i, on its host's loopback)\n"+
			"  clean up: sudo %s lab --clean\n", strings.Join(ns, " "), firstHost(ns), lab.StateDir, firstHost(ns), lab.MetricsBase, lab.MetricsBase, bin)
	}
	if len(runnable) == 0 {
		return fmt.Errorf("no scenario the lab can make")
	}
	return rep.writeSVG(common.svg, runnable[0])
}

// writeRequests writes one run's request records as --requests does.
func writeRequests(path, scName, policy string, reqs []scenario.Request) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, q := range reqs {
		if err := enc.Encode(labRequest{scName, policy, q}); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// labRequest is one line of --requests.
type labRequest struct {
	Scenario string `json:"scenario"`
	Policy   string `json:"policy"`
	scenario.Request
}

func firstHost(ns []string) string {
	for _, n := range ns {
		if !strings.HasSuffix(n, "-br") {
			return n
		}
	}
	return "kvp2plab-h0"
}

// soakOut are the flags a soak shares with a scenario run: --requests and
// --keep are how a person finds out which requests made a figure (the
// soak's false fallbacks are judged from them).
type soakOut struct {
	logLevel, reqPath string
	keep              bool
}

// runSoak is `kvp2p lab --soak D`: under one policy (domain for "all").
func runSoak(ctx context.Context, d time.Duration, seed int64, policy string, o soakOut, stdout io.Writer) error {
	if policy == "all" {
		policy = health.Domain
	}
	if !slices.Contains(health.Names(), policy) {
		return fmt.Errorf("--policy %q: want %s", policy, strings.Join(health.Names(), ", "))
	}
	sc, err := lab.SoakScenario(d, seed)
	if err != nil {
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
	fmt.Fprintf(stdout, "soak: %v under %s, %d faults (seed %d), mixed workload until %v...\n", d, policy, len(sc.Faults), seed, sc.Workload.Stop)
	res, err := lab.Soak(ctx, sc, policy, lab.Options{Bin: bin, Progress: stdout, LogLevel: o.logLevel, Keep: o.keep})
	if err != nil {
		return err
	}
	if o.reqPath != "" {
		if err := writeRequests(o.reqPath, sc.Name, policy, res.Run.Requests); err != nil {
			return err
		}
	}
	if o.keep {
		fmt.Fprintf(stdout, "--keep: the soak's hosts are up (logs in %s); clean up: sudo %s lab --clean\n", lab.StateDir, bin)
	}
	fmt.Fprintln(stdout)
	scenario.Table(stdout, []scenario.Report{res.Run.Report})
	kinds := make([]string, 0, len(res.Faults))
	for k, n := range res.Faults {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	slices.Sort(kinds)
	fmt.Fprintf(stdout, "\nfaults made: %s\n", strings.Join(kinds, ", "))
	var maxAnon int64
	maxThreads, who := 0, ""
	for id, a := range res.MaxAnon {
		if a > maxAnon {
			maxAnon, who = a, id
		}
	}
	for _, t := range res.MaxThreads {
		maxThreads = max(maxThreads, t)
	}
	maxGor, gorWho, grew, grewWho := 0, "", math.MinInt, ""
	for id, g := range res.MaxGoroutines {
		if g > maxGor {
			maxGor, gorWho = g, id
		}
	}
	for id, end := range res.EndOwn {
		if d := end - res.StartOwn[id]; d > grew {
			grew, grewWho = d, id
		}
	}
	fmt.Fprintf(stdout, "largest process RssAnon %.1f MiB (%s), most threads %d, most goroutines %d (%s)\n",
		float64(maxAnon)/(1<<20), who, maxThreads, maxGor, gorWho)
	if grewWho != "" {
		fmt.Fprintf(stdout, "goroutines beyond their sessions', start to end: largest change %+d (%s) over %d processes\n",
			grew, grewWho, len(res.EndOwn))
	}
	if len(res.Violations) > 0 {
		fmt.Fprintf(stdout, "\n%d violations:\n  %s\n", len(res.Violations), strings.Join(res.Violations, "\n  "))
		return fmt.Errorf("soak: %d violations", len(res.Violations))
	}
	fmt.Fprintln(stdout, "no violation: no corrupt load, no leaked slot, nothing stuck, no request older than its timeouts, memory, threads and goroutines bounded, no goroutine growth")
	return nil
}
