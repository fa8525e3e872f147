package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/report"
	"github.com/kvp2p/kvp2p/internal/scenario"
)

// What kvp2p lab does once its flags are read and the lab is held
// (Acquire): which scenarios it can make, the runs and their report, and
// the soak's verdict.

// Runnable is the scenarios of scs the lab can make (CheckKinds). With
// strict (one scenario named) one it cannot make is an error; otherwise
// it is skipped with a line on stderr.
func Runnable(scs []*scenario.Scenario, strict bool, stderr io.Writer) ([]*scenario.Scenario, error) {
	for _, sc := range scs {
		if err := CheckKinds(sc); err != nil {
			if strict {
				return nil, err
			}
			fmt.Fprintf(stderr, "kvp2p lab: skipping %v\n", err)
		}
	}
	runnable := scs[:0]
	for _, sc := range scs {
		if CheckKinds(sc) == nil {
			runnable = append(runnable, sc)
		}
	}
	return runnable, nil
}

// Output is how Execute reports.
type Output struct {
	JSON     bool      // stdout: one JSON report a line and nothing else
	Keep     bool      // the last run's hosts stay up: print how to reach them
	Requests io.Writer // every request's record, one JSON object a line; nil: none
}

// Execute runs each scenario under each policy on real processes (the
// lab must be held), prints progress and docs/design.md §7's table, and
// returns the runs, for --svg. With out.Keep the last run's hosts stay up.
func Execute(ctx context.Context, runnable []*scenario.Scenario, policies []string, opt Options, out Output, stdout io.Writer) ([]report.Run, error) {
	keep := out.Keep
	rep := report.NewCollector(stdout, out.JSON)
	for i, sc := range runnable {
		for j, p := range policies {
			last := i == len(runnable)-1 && j == len(policies)-1
			if !out.JSON {
				fmt.Fprintf(stdout, "%s under %s: %v on real processes...\n", sc.Name, p, sc.Duration)
			}
			var progress io.Writer
			if !out.JSON {
				progress = stdout
			}
			o := opt
			o.Keep, o.Progress = keep && last, progress
			r, err := Run(ctx, sc, p, o)
			if err != nil {
				return nil, fmt.Errorf("%s under %s: %w", sc.Name, p, err)
			}
			if out.Requests != nil {
				if err := WriteRequests(out.Requests, sc.Name, p, r.Requests); err != nil {
					return nil, err
				}
			}
			if err := rep.Add(r); err != nil {
				return nil, err
			}
		}
	}
	if !out.JSON {
		fmt.Fprintln(stdout)
		rep.Table()
	}
	if keep && len(runnable) > 0 {
		ns, _ := Namespaces()
		fmt.Fprintf(stdout, "\n--keep: the last run's hosts are up: %s\n"+
			"  poke:     sudo ip netns exec %s ss -tnp   (configs, sockets, logs in %s)\n"+
			"  metrics:  sudo ip netns exec %s curl -s 127.0.0.1:%d/metrics   (rank i of the scenario: port %d+i, on its host's loopback)\n"+
			"  clean up: sudo %s lab --clean\n", strings.Join(ns, " "), firstHost(ns), StateDir, firstHost(ns), MetricsBase, MetricsBase, opt.Bin)
	}
	if len(runnable) == 0 {
		return nil, fmt.Errorf("no scenario the lab can make")
	}
	return rep.Runs(), nil
}

// WriteRequests writes reqs to w as --requests does: one JSON object a
// line, each with its scenario and policy.
func WriteRequests(w io.Writer, scName, policy string, reqs []report.Request) error {
	enc := json.NewEncoder(w)
	for _, q := range reqs {
		if err := enc.Encode(requestLine{scName, policy, q}); err != nil {
			return err
		}
	}
	return nil
}

// requestLine is one line of --requests.
type requestLine struct {
	Scenario string `json:"scenario"`
	Policy   string `json:"policy"`
	report.Request
}

// firstHost is the first host namespace of ns, not the bridge's.
func firstHost(ns []string) string {
	for _, n := range ns {
		if !strings.HasSuffix(n, "-br") {
			return n
		}
	}
	return "kvp2plab-h0"
}

// SoakPolicy is the policy a soak runs under: the one named, domain for
// "all".
func SoakPolicy(policy string) (string, error) {
	if policy == "all" {
		policy = health.Domain
	}
	if !slices.Contains(health.Names(), policy) {
		return "", fmt.Errorf("--policy %q: want %s", policy, strings.Join(health.Names(), ", "))
	}
	return policy, nil
}

// PrintSoak prints a soak's report, the faults made, the largest
// processes, and its violations, which it returns as an error.
func PrintSoak(stdout io.Writer, res SoakResult) error {
	fmt.Fprintln(stdout)
	report.Table(stdout, []report.Report{res.Run.Report})
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
