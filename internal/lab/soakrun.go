package lab

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/kvp2p/kvp2p/internal/report"
)

// SoakFlags are the flags a soak shares with a scenario run: --requests
// and --keep are how a person finds out which requests made a figure (the
// soak's false fallbacks are judged from them).
type SoakFlags struct {
	LogLevel, ReqPath string
	Keep              bool
}

// RunSoak is `kvp2p lab --soak D`: under one policy (domain for "all").
func RunSoak(ctx context.Context, d time.Duration, seed int64, policy string, o SoakFlags, stdout io.Writer) error {
	policy, err := SoakPolicy(policy)
	if err != nil {
		return err
	}
	sc, err := SoakScenario(d, seed)
	if err != nil {
		return err
	}
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	l, err := Acquire()
	if err != nil {
		return err
	}
	defer l.Release()
	fmt.Fprintf(stdout, "soak: %v under %s, %d faults (seed %d), mixed workload until %v...\n", d, policy, len(sc.Faults), seed, sc.Workload.Stop)
	res, err := Soak(ctx, sc, policy, Options{Bin: bin, Progress: stdout, LogLevel: o.LogLevel, Keep: o.Keep})
	if err != nil {
		return err
	}
	if o.ReqPath != "" {
		if err := writeRequestsFile(o.ReqPath, sc.Name, policy, res.Run.Requests); err != nil {
			return err
		}
	}
	if o.Keep {
		fmt.Fprintf(stdout, "--keep: the soak's hosts are up (logs in %s); clean up: sudo %s lab --clean\n", StateDir, bin)
	}
	return PrintSoak(stdout, res)
}

// writeRequestsFile writes a soak's request records to path, as --requests
// does for scenario runs.
func writeRequestsFile(path, scName, policy string, reqs []report.Request) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := WriteRequests(f, scName, policy, reqs); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
