package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/kvp2p/kvp2p/internal/config"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// After the first signal starts a graceful stop, a second one kills at
	// once: stop restores the default handlers.
	go func() { <-ctx.Done(); stop() }()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: kvp2p <command> [flags]

commands:
  bench    measure loads against raw TCP, and lookup round trips, on 127.0.0.1
  demo     run a small fleet on 127.0.0.1 with injected faults, per policy
  lab      real processes in network namespaces, faults made by the kernel (needs root)
  proxy    an OpenAI-compatible front for vLLM engines: symmetric or prefill/decode
  sim      simulate scenarios under each failure policy
  serve    run one node from a YAML config, environment and flags
  status   show a running node's peers, domains, sessions and loads
  version  print kvp2p's version

Each command takes -h for its flags. docs/design.md explains the design,
docs/evaluation.md what each command measured.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "bench":
		err = runBench(ctx, args[1:], stdout, stderr)
	case "demo":
		err = runDemo(ctx, args[1:], stdout, stderr)
	case "lab":
		err = runLab(ctx, args[1:], stdout, stderr)
	case "proxy":
		err = runProxy(ctx, args[1:], stdout, stderr)
	case "serve":
		err = runServe(ctx, args[1:], stdout, stderr)
	case "sim":
		err = runSim(ctx, args[1:], stdout, stderr)
	case "status":
		err = runStatus(ctx, args[1:], stdout, stderr)
	case "version", "--version":
		err = runVersion(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "kvp2p: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	var cfgErr *config.Error
	var machErr *config.MachineError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errReported):
		return 2 // package flag printed it with the usage
	case errors.As(err, &cfgErr):
		fmt.Fprintf(stderr, "kvp2p %s: %v\n", args[0], err)
		return 2
	case errors.As(err, &machErr):
		fmt.Fprintf(stderr, "kvp2p %s: %v\n", args[0], err)
		return 3
	}
	fmt.Fprintf(stderr, "kvp2p %s: %v\n", args[0], err)
	return 1
}

// parseFlagsOnly parses a command's flags, which must be all of its
// arguments. Its error is flag.ErrHelp for -h, or errReported once the
// flag package or it has printed what is wrong.
func parseFlagsOnly(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errReported
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "kvp2p %s: unexpected argument %q (flags only)\n", fs.Name(), fs.Arg(0))
		return errReported
	}
	return nil
}

// addLogFlags adds --log-format and --log-level, for config.NewLogger.
func addLogFlags(fs *flag.FlagSet, format, level *string) {
	fs.StringVar(format, "log-format", "", "log `format`: text or json (default text; env KVP2P_LOG_FORMAT)")
	fs.StringVar(level, "log-level", "", "log `level`: debug, info, warn or error (default info; env KVP2P_LOG_LEVEL)")
}
