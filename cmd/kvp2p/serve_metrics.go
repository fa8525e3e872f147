package main

import (
	"log/slog"
	"net"

	"github.com/kvp2p/kvp2p/internal/metrics"
	"github.com/kvp2p/kvp2p/internal/metrics/prom"
	"github.com/kvp2p/kvp2p/internal/node"
	"github.com/kvp2p/kvp2p/internal/status"
)

// startMetrics serves the node's metrics (from src), status page and probes on
// cfg.MetricsAddr, if set. The returned func stops the server; call it
// even on error.
func startMetrics(cfg node.Config, src metrics.Source, log *slog.Logger) (func(), error) {
	if cfg.MetricsAddr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", cfg.MetricsAddr)
	if err != nil {
		return func() {}, err // net's message names the address
	}
	srv := status.Start(ln, status.NewHandler(src, prom.NewRegistry(src, nil)))
	log.Info("metrics and status", "addr", ln.Addr().String())
	return func() { _ = srv.Close() }, nil
}
