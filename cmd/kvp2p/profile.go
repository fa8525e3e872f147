package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"runtime/trace"
)

// profileFlags are the demo's and bench's --cpuprofile and --trace: what
// issue 14 asks to look at (go tool pprof, go tool trace) to tell the
// nodes' time from the harness's.
type profileFlags struct {
	cpu, trace string
}

func (p *profileFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.cpu, "cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof)")
	fs.StringVar(&p.trace, "trace", "", "write an execution trace of the run to this file (go tool trace)")
}

// start starts what was asked for; the returned stop ends it and reports
// the first error.
func (p *profileFlags) start() (stop func() error, err error) {
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
	if p.cpu != "" {
		f, err := open(p.cpu)
		if err != nil {
			return nil, errors.Join(err, stop())
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, errors.Join(fmt.Errorf("--cpuprofile: %w", err), stop())
		}
		ends = append(ends, pprof.StopCPUProfile)
	}
	if p.trace != "" {
		f, err := open(p.trace)
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
