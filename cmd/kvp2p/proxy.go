package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/kvp2p/kvp2p/internal/config"
	"github.com/kvp2p/kvp2p/internal/proxy"
)

// engineList is a repeatable flag of engines: URL[,kv=HOST:PORT][,domain=NAME].
type engineList []proxy.Engine

func (l *engineList) String() string { return "" }

func (l *engineList) Set(s string) error {
	parts := strings.Split(s, ",")
	e := proxy.Engine{URL: parts[0]}
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "=")
		switch k {
		case "kv":
			e.Peer = v
		case "domain":
			e.Domain = v
		default:
			return fmt.Errorf("%q: want URL[,kv=HOST:PORT][,domain=NAME]", s)
		}
	}
	*l = append(*l, e)
	return nil
}

// proxyOptions are proxy's flags.
type proxyOptions struct {
	listen, mode, pick, source  string
	logFormat, logLevel         string
	engines, prefill, decode    engineList
	memory                      int
	maxBody                     int64
	connect, legTimeout, health time.Duration
}

func parseProxyFlags(args []string, stderr io.Writer) (proxyOptions, error) {
	var o proxyOptions
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8000", "`address` the OpenAI API listens on (port 0: any free port)")
	fs.StringVar(&o.mode, "mode", "symmetric", "`mode`: symmetric (each request whole to one engine) or pd (a prefiller, then a decoder)")
	fs.Var(&o.engines, "engine", "a symmetric engine: its OpenAI URL, then optionally ,kv=HOST:PORT (its kvp2p sidecar's peer id) and ,domain=NAME (the sidecar's failure domain), e.g. http://10.0.0.7:8000,kv=10.0.0.7:7600 (repeatable `spec`)")
	fs.Var(&o.prefill, "prefiller", "a pd prefiller, as --engine; kv is required (repeatable `spec`)")
	fs.Var(&o.decode, "decoder", "a pd decoder, as --engine (repeatable `spec`)")
	fs.StringVar(&o.pick, "pick", "least-loaded", "`how` an engine is picked among its role's: least-loaded (fewest requests in flight) or round-robin")
	fs.StringVar(&o.source, "source", "remembered", "symmetric: `which` source to name: remembered (name the engine that last ran the prompt's prefix as its source; every engine needs kv) or none (name no source)")
	fs.IntVar(&o.memory, "prefix-memory", 1<<16, "with --source remembered, how many prompt-prefix `entries` to remember (one per 64 tokens of a prompt, about 100 bytes each)")
	fs.Int64Var(&o.maxBody, "max-body", 16<<20, "largest request body, in `bytes`")
	fs.DurationVar(&o.connect, "connect-timeout", 5*time.Second, "bound on connecting to an engine")
	fs.DurationVar(&o.legTimeout, "timeout", 0, "bound on each request to an engine, to the end of its response (0: none)")
	fs.DurationVar(&o.health, "health-timeout", 2*time.Second, "bound on each engine's /health check")
	addLogFlags(fs, &o.logFormat, &o.logLevel)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: kvp2p proxy [--mode symmetric] --engine URL[,kv=HOST:PORT] ...\n"+
			"       kvp2p proxy --mode pd --prefiller URL,kv=HOST:PORT ... --decoder URL ...\n\n"+
			"An OpenAI-compatible front (/v1/completions, /v1/chat/completions, /v1/models,\n"+
			"/health) for vLLM engines with kvp2p sidecars. It names sources in\n"+
			"kv_transfer_params: remote_kv_source (symmetric, --source remembered), or\n"+
			"remote_decoder then remote_prefiller (pd). SIGTERM/SIGINT stop it.\n\nflags:\n")
		fs.PrintDefaults()
	}
	return o, parseFlagsOnly(fs, args, stderr)
}

// proxyConfig turns proxy's flags into a proxy.Config.
func proxyConfig(o proxyOptions) (proxy.Config, error) {
	cfg := proxy.Config{
		Engines: o.engines, Prefillers: o.prefill, Decoders: o.decode,
		MaxBodyBytes: o.maxBody, ConnectTimeout: o.connect, LegTimeout: o.legTimeout, HealthTimeout: o.health,
	}
	switch o.mode {
	case "symmetric":
	case "pd":
		cfg.Mode = proxy.ModePD
	default:
		return cfg, config.Errorf("--mode %q: want symmetric or pd", o.mode)
	}
	switch o.pick {
	case "least-loaded":
	case "round-robin":
		cfg.Pick = proxy.PickRoundRobin
	default:
		return cfg, config.Errorf("--pick %q: want least-loaded or round-robin", o.pick)
	}
	switch o.source {
	case "none":
	case "remembered":
		if cfg.Mode == proxy.ModeSymmetric {
			if o.memory <= 0 {
				return cfg, config.Errorf("--prefix-memory must be positive")
			}
			cfg.Locator = proxy.NewMemory(o.memory)
		}
	default:
		return cfg, config.Errorf("--source %q: want remembered or none", o.source)
	}
	if o.maxBody <= 0 || o.connect <= 0 || o.health <= 0 || o.legTimeout < 0 {
		return cfg, config.Errorf("--max-body, --connect-timeout and --health-timeout must be positive, --timeout not negative")
	}
	return cfg, nil
}

// runProxy serves the proxy until ctx ends (SIGTERM or SIGINT), then lets
// the requests in flight finish, within shutdownTimeout.
func runProxy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseProxyFlags(args, stderr)
	if err != nil {
		return err
	}
	cfg, err := proxyConfig(o)
	if err != nil {
		return err
	}
	if cfg.Log, err = config.NewLogger(stderr, o.logFormat, o.logLevel, os.LookupEnv); err != nil {
		return err
	}
	p, err := proxy.New(cfg)
	if err != nil {
		return config.Errorf("%s", strings.TrimPrefix(err.Error(), "proxy: "))
	}
	defer p.Close()
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	// The address on stdout, for scripts that listen on port 0.
	fmt.Fprintf(stdout, "kvp2p proxy: serving http://%s\n", ln.Addr())
	cfg.Log.Info("proxy serving", "addr", ln.Addr().String(), "mode", cfg.Mode.String(), "pick", cfg.Pick.String(),
		"source", o.source, "engines", len(cfg.Engines), "prefillers", len(cfg.Prefillers), "decoders", len(cfg.Decoders))
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	serr := srv.Shutdown(sctx)
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	if serr != nil {
		srv.Close()
		return fmt.Errorf("shutdown: %w", serr)
	}
	cfg.Log.Info("stopped")
	return nil
}
