package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/kvp2p/kvp2p/internal/bench"
)

// kvp2p bench: its flags; the measurements are internal/bench's.

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := bench.Options{Bytes: 256 << 20}
	jsonOut := false
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Func("bytes", "`size` of one load, e.g. 256MiB, 64MB, 1048576 (default 256MiB)", func(s string) error {
		n, err := bench.ParseSize(s)
		o.Bytes = n
		return err
	})
	fs.IntVar(&o.Block, "block-bytes", 256<<10, "bytes per block")
	fs.IntVar(&o.Runs, "runs", 5, "interleaved runs of each measurement")
	fs.IntVar(&o.Lookups, "lookups", 1000, "lookup round trips per run")
	fs.Float64Var(&o.LookupRate, "lookup-rate", 0, "pace the lookups at `N` per second (0: back to back, into the peer's control-message limit)")
	fs.BoolVar(&jsonOut, "json", false, "print one JSON object")
	var fo bench.FleetOptions
	fleetMode := fs.Bool("fleet", false, "instead: the saturation curve of --sources sources and one consumer (time to hit against offered load)")
	fs.IntVar(&fo.Sources, "sources", 10, "--fleet: source nodes")
	fs.IntVar(&fo.Blocks, "blocks", 16, "--fleet: blocks per request")
	fs.DurationVar(&fo.Duration, "duration", 3*time.Second, "--fleet: how long each offered rate lasts")
	rates := fs.String("rates", "5,10,20,40,60,80", "--fleet: offered rates, requests per second, comma-separated")
	fs.IntVar(&o.FanIn, "fanin", 0, "also load from `N` producers into one consumer at once (--bytes split among them) against N raw TCP streams, interleaved")
	fs.BoolVar(&o.TLS, "tls", false, "also load between two nodes with mutual TLS (certificates made in process), interleaved")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: kvp2p bench [--bytes 256MiB] [--block-bytes 262144] [--runs 5] [--fanin 8] [--tls] [--json]\n       kvp2p bench --fleet [--sources 10] [--blocks 16] [--rates 5,10,20,40] [--duration 3s] [--json]\n\n"+
			"Loads --bytes from one node to another over 127.0.0.1 and copies the same bytes over\n"+
			"plain TCP, then times symmetric lookup round trips and a raw TCP ping-pong; --runs times each,\ninterleaved.\n\nflags:\n")
		fs.PrintDefaults()
	}
	err := fs.Parse(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errReported
	}
	bad := func(format string, a ...any) error {
		fmt.Fprintf(stderr, "kvp2p bench: "+format+"\n", a...)
		return errReported
	}
	switch {
	case fs.NArg() > 0:
		return bad("unexpected argument %q (flags only)", fs.Arg(0))
	case o.Block <= 0 || o.Block > 256<<20:
		return bad("--block-bytes %d: want 1..%d", o.Block, 256<<20)
	case o.Bytes < int64(o.Block):
		return bad("--bytes %d: want at least one block (%d)", o.Bytes, o.Block)
	case o.Bytes > 64<<30:
		return bad("--bytes %d: at most 64GiB", o.Bytes)
	case o.Runs < 1:
		return bad("--runs %d: want at least 1", o.Runs)
	case o.Lookups < 1:
		return bad("--lookups %d: want at least 1", o.Lookups)
	case o.LookupRate < 0 || o.LookupRate > 1e6:
		return bad("--lookup-rate %v: want 0..1000000", o.LookupRate)
	case o.FanIn < 0 || o.FanIn > 64:
		return bad("--fanin %d: want 0..64", o.FanIn)
	case o.FanIn > 0 && (o.Bytes+int64(o.Block)-1)/int64(o.Block) < int64(o.FanIn):
		return bad("--fanin %d: --bytes holds fewer blocks than sources", o.FanIn)
	}
	if *fleetMode {
		fo.Block = o.Block
		if fo.Rates, err = bench.ParseRates(*rates); err != nil {
			return bad("--rates: %v", err)
		}
		if fo.Sources < 1 || fo.Blocks < 1 || fo.Duration <= 0 {
			return bad("--sources, --blocks, --duration: want positive values")
		}
		rep, err := bench.Fleet(ctx, fo)
		if err != nil {
			return err
		}
		if jsonOut {
			return json.NewEncoder(stdout).Encode(rep)
		}
		bench.PrintFleet(stdout, rep)
		return nil
	}
	rep, err := bench.Run(ctx, o, stderr)
	if err != nil {
		return err
	}
	if jsonOut {
		return json.NewEncoder(stdout).Encode(rep)
	}
	bench.Print(stdout, rep)
	return nil
}
