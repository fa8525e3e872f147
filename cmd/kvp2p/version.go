package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"

	"github.com/kvp2p/kvp2p"
)

// runVersion is `kvp2p version`: the release (kvp2p.Version, the same
// string as the Python package's __version__), then the Go toolchain and
// platform the binary was built for, which say which binary a bug report is
// about.
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: kvp2p version\n\nPrints kvp2p's version, the Go version it was built with and its platform.\n")
	}
	if err := parseRunArgs(fs, args); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "kvp2p %s (%s %s/%s)\n", kvp2p.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}
