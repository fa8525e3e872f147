package demo

import (
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"runtime/trace"
)

// StartProfiles starts what the demo's --cpuprofile and --trace ask for
// (empty: not asked): what issue 14 asks to look at (go tool pprof, go
// tool trace) to tell the nodes' time from the harness's. The returned
// stop ends them and reports the first error.
func StartProfiles(cpu, traceFile string) (stop func() error, err error) {
	var files []*os.File
	var ends []func()
	stop = func() error {
		for _, e := range ends {
			e()
		}
		var errs []error
		for _, f := range files {
			errs = append(errs, f.Close())
		}
		return errors.Join(errs...)
	}
	open := func(path string) (*os.File, error) {
		f, err := os.Create(path)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
		return f, nil
	}
	if cpu != "" {
		f, err := open(cpu)
		if err != nil {
			return nil, errors.Join(err, stop())
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, errors.Join(fmt.Errorf("--cpuprofile: %w", err), stop())
		}
		ends = append(ends, pprof.StopCPUProfile)
	}
	if traceFile != "" {
		f, err := open(traceFile)
		if err != nil {
			return nil, errors.Join(err, stop())
		}
		if err := trace.Start(f); err != nil {
			return nil, errors.Join(fmt.Errorf("--trace: %w", err), stop())
		}
		ends = append(ends, trace.Stop)
	}
	return stop, nil
}
