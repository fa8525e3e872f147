package main

import (
	"fmt"
	"log/slog"
	"net"

	"github.com/kvp2p/kvp2p"
	"github.com/kvp2p/kvp2p/internal/engineapi"
)

// startEngineAPI serves the engine API on the configured Unix socket and
// TCP address, if any. The listeners close when the node stops; the
// returned function closes them on the paths that never reach that.
func startEngineAPI(cfg kvp2p.Config, serve func(net.Listener) error, log *slog.Logger) (func(), error) {
	var lns []net.Listener
	closeAll := func() {
		for _, ln := range lns {
			ln.Close()
		}
	}
	if cfg.Engine.Socket != "" {
		ln, err := engineapi.ListenUnix(cfg.Engine.Socket)
		if err != nil {
			return closeAll, fmt.Errorf("engine socket: %w", err)
		}
		lns = append(lns, ln)
	}
	if cfg.Engine.Addr != "" {
		ln, err := net.Listen("tcp", cfg.Engine.Addr)
		if err != nil {
			closeAll()
			return closeAll, fmt.Errorf("engine addr: %w", err)
		}
		lns = append(lns, ln)
	}
	for _, ln := range lns {
		go func() {
			if err := serve(ln); err != nil {
				log.Error("engine API stopped", "addr", ln.Addr().String(), "err", err)
			}
		}()
		log.Info("engine API", "addr", ln.Addr().String())
	}
	return closeAll, nil
}
