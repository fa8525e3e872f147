package sidecar

import (
	"fmt"
	"log/slog"
	"net"

	"github.com/kvp2p/kvp2p/internal/engineapi"
)

// Listen serves the engine API on the configured Unix socket and TCP
// address, if any, and the step socket next to the Unix socket. The
// listeners close when the sidecar stops; the returned function closes
// them on the paths that never reach that (it is never nil).
func (sc *Sidecar) Listen(cfg EngineConfig, log *slog.Logger) (func(), error) {
	var lns []net.Listener // the gRPC ones
	var steps net.Listener
	closeAll := func() {
		for _, ln := range lns {
			ln.Close()
		}
		if steps != nil {
			steps.Close()
		}
	}
	if cfg.Socket != "" {
		ln, err := engineapi.ListenUnix(cfg.Socket)
		if err != nil {
			return closeAll, fmt.Errorf("engine socket: %w", err)
		}
		lns = append(lns, ln)
	}
	if cfg.Addr != "" {
		ln, err := net.Listen("tcp", cfg.Addr)
		if err != nil {
			closeAll()
			return closeAll, fmt.Errorf("engine addr: %w", err)
		}
		lns = append(lns, ln)
	}
	if cfg.Socket != "" {
		// The step socket: Step without gRPC for the engine on this host.
		// Without it engines step over gRPC, slower: not fatal. Advertised
		// before the engine API serves, so every engine hears of it.
		path := engineapi.StepSocketPath(cfg.Socket)
		ln, err := engineapi.ListenUnix(path)
		if err != nil {
			log.Warn("no step socket: engines step over gRPC", "path", path, "err", err)
		} else {
			steps = ln
			sc.AdvertiseSteps(ln)
			go func() {
				if err := sc.ServeSteps(ln); err != nil {
					log.Error("step socket stopped", "addr", path, "err", err)
				}
			}()
			log.Info("engine API step socket", "addr", path)
		}
	}
	for _, ln := range lns {
		go func() {
			if err := sc.ServeEngine(ln); err != nil {
				log.Error("engine API stopped", "addr", ln.Addr().String(), "err", err)
			}
		}()
		log.Info("engine API", "addr", ln.Addr().String())
	}
	return closeAll, nil
}
