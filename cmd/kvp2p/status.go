package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/kvp2p/kvp2p/internal/config"
	"github.com/kvp2p/kvp2p/internal/status"
)

// defaultMetricsAddr is where `kvp2p status` looks without --addr or
// KVP2P_METRICS_ADDR: the address examples/kvp2p.yaml suggests.
const defaultMetricsAddr = "127.0.0.1:9464"

// runStatus asks a running node for its snapshot over its metrics address
// and prints it: peers grouped by failure domain, sessions, ejections,
// loads in flight.
func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "", "the node's metrics `address` (config metrics_addr; default env KVP2P_METRICS_ADDR, else "+defaultMetricsAddr+")")
	asJSON := fs.Bool("json", false, "print the snapshot as JSON")
	watch := fs.Bool("watch", false, "refresh until interrupted")
	every := fs.Duration("interval", 2*time.Second, "refresh `interval` with --watch")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the node")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: kvp2p status [--addr HOST:PORT] [--json] [--watch [--interval 2s]]\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := parseFlagsOnly(fs, args, stderr); err != nil {
		return err
	}
	if *every <= 0 {
		return config.Errorf("--interval must be positive")
	}
	target := cmp.Or(*addr, os.Getenv(config.EnvPrefix+"METRICS_ADDR"), defaultMetricsAddr)
	return status.Watch(ctx, &http.Client{Timeout: *timeout}, target, status.WatchOptions{JSON: *asJSON, Watch: *watch, Every: *every}, stdout, stderr)
}
