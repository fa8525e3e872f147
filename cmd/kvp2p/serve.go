package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/kvp2p/kvp2p/internal/config"
	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/node"
	"github.com/kvp2p/kvp2p/internal/sidecar"
	"github.com/kvp2p/kvp2p/internal/status"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// shutdownTimeout bounds a graceful stop. Kubernetes sends SIGKILL 30 s after
// SIGTERM by default; ending on our own terms leaves a log line behind.
const shutdownTimeout = 10 * time.Second

// errReported is an error the flag package has already printed with the
// usage; run exits 2 without printing it again.
var errReported = errors.New("usage error")

// policyHelp names the policies for --policy's help, the default first.
func policyHelp() string {
	others := slices.DeleteFunc(slices.Clone(health.Names()), func(p string) bool { return p == node.DefaultPolicy })
	return node.DefaultPolicy + " (default), " + strings.Join(others, " or ")
}

// serveOptions are serve's flags that are not config fields.
type serveOptions struct {
	configPath string
	logFormat  string // text or json
	logLevel   string
	sets       []config.Setting // config overrides, in command-line order
}

// settingFlag is a flag that overrides one config field; --set names the
// field in its value. All of them append to one list, so that the last one
// on the command line wins whichever spelling it used.
type settingFlag struct {
	name string // flag name, for error messages
	path string // config field; empty for --set
	list *[]config.Setting
}

func (f settingFlag) String() string { return "" }

func (f settingFlag) Set(s string) error {
	path, value := f.path, s
	if path == "" {
		var ok bool
		if path, value, ok = strings.Cut(s, "="); !ok || path == "" {
			return fmt.Errorf("want field=value, e.g. timers.stall_timeout=1s")
		}
	}
	*f.list = append(*f.list, config.Setting{Source: "flag --" + f.name, Path: path, Value: value})
	return nil
}

func parseServeFlags(args []string, stderr io.Writer) (serveOptions, error) {
	var o serveOptions
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.configPath, "config", "", "YAML config `file` (optional when peer_id comes from env or flags)")
	for _, f := range []struct{ name, path, usage string }{
		{"peer-id", "peer_id", "advertised, routable `host:port` (config peer_id)"},
		{"listen", "listen", "`address` to bind (config listen; default: peer_id)"},
		{"failure-domain", "failure_domain", "failure `domain`: what fails with this node, e.g. a pod UID (config failure_domain)"},
		{"policy", "policy", "failure `policy`: " + policyHelp() + " (config policy)"},
		{"engine-socket", "engine.socket", "engine API Unix socket `path`: makes the node an engine's sidecar (config engine.socket)"},
		{"region-dir", "engine.region_dir", "`directory` engine region files must be in (config engine.region_dir; default /dev/shm)"},
		{"metrics-addr", "metrics_addr", "`host:port` for /metrics, the status page and probes, e.g. 127.0.0.1:9464 (config metrics_addr; default off)"},
	} {
		fs.Var(settingFlag{name: f.name, path: f.path, list: &o.sets}, f.name, f.usage)
	}
	fs.Var(settingFlag{name: "set", list: &o.sets}, "set", "set any config `field=value`, e.g. timers.stall_timeout=1s (repeatable)")
	addLogFlags(fs, &o.logFormat, &o.logLevel)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: kvp2p serve [--config FILE] [flags]\n\n"+
			"Precedence: defaults < file < env KVP2P_<FIELD> (e.g. KVP2P_TIMERS_STALL_TIMEOUT) < flags.\n\n"+
			"Signals: SIGTERM/SIGINT drain and stop; SIGHUP reloads the TLS files;\n"+
			"SIGUSR1 ends every session now with Goodbye(idle), as idle eviction does;\n"+
			"SIGUSR2 toggles refusing new handshakes (as incompatible); each logs what it did.\n\nflags:\n")
		fs.PrintDefaults()
	}
	return o, parseFlagsOnly(fs, args, stderr)
}

// server is what serve runs: a *node.Node, or a *sidecar.Sidecar, whose
// node may be built only when its engine registers.
type server interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Status(context.Context) (*node.Snapshot, error)
	ReloadTLS() error
	admin
}

// runServe runs one node until ctx ends (SIGTERM or SIGINT), then shuts it
// down gracefully. Config errors are *config.Error (exit 2).
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseServeFlags(args, stderr)
	if err != nil {
		return err
	}
	cfg, err := config.Load(o.configPath, os.LookupEnv, o.sets)
	if err != nil {
		return err
	}
	log, err := config.NewLogger(stderr, o.logFormat, o.logLevel, os.LookupEnv)
	if err != nil {
		return err
	}
	cfg.Log = log

	addr := cfg.Listen
	if addr == "" {
		addr = cfg.PeerID
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err // net's message names the address
	}
	// Serve hands ln to the node, which closes it on the way out; this is for
	// the paths that never reach Serve.
	defer ln.Close()
	var srv server
	if cfg.Engine.Enabled() {
		// A sidecar: its node is built at the engine's first Register when
		// the config leaves the geometry (slots, block_bytes) to the engine.
		sc, err := sidecar.New(cfg.Config, cfg.Engine)
		if err != nil {
			return err
		}
		srv = sc
		if sc.Node() == nil {
			log.Info("slots and block_bytes not configured: the node starts at the engine's first Register, with its region's geometry")
		}
		closeEngine, err := sc.Listen(cfg.Engine, log)
		defer closeEngine()
		if err != nil {
			return err
		}
	} else if srv, err = node.New(cfg.Config); err != nil {
		return err
	}
	// The status server outlives the node's drain: probes see it not ready.
	var prefix status.PrefixFunc
	if cfg.Find.Enabled {
		prefix = func(keys []wire.Key) ([]status.PrefixNode, error) { return prefixes(srv, keys) }
	}
	closeMetrics, err := status.Listen(cfg.MetricsAddr, srv.Status, log, prefix)
	defer closeMetrics()
	if err != nil {
		return err
	}
	// SIGHUP reloads the TLS files (they are also reloaded when they
	// change); SIGUSR1 and SIGUSR2 are the operator's calls (see adminSignal).
	// Registered before "serving" is logged, so that a signal sent after
	// that line is never the default (fatal) one.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("serving", "peer_id", cfg.PeerID, "addr", ln.Addr().String(),
		"failure_domain", cfg.FailureDomain, "policy", cmp.Or(cfg.Policy, node.DefaultPolicy), "tls", cfg.TLS.Enabled())

	refusing := false
wait:
	for {
		select {
		case err := <-served:
			// The node stopped without being asked to.
			if err == nil {
				err = errors.New("node stopped unexpectedly")
			}
			return err
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				if err := srv.ReloadTLS(); err != nil {
					log.Error("tls reload failed, keeping the old certificate", "err", err)
				} else {
					log.Info("tls reloaded")
				}
				continue
			}
			refusing = adminSignal(srv, sig, refusing, log)
		case <-ctx.Done():
			break wait
		}
	}

	// A drain longer than our bound would always be cut short; give it room.
	timeout := max(shutdownTimeout, cfg.Timers.ShutdownDrain+2*time.Second)
	log.Info("shutting down", "timeout", timeout)
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	serr := srv.Shutdown(sctx) // closes the node itself if sctx ends first
	if err := <-served; err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("shutdown: %w", serr)
	}
	log.Info("stopped")
	return nil
}
