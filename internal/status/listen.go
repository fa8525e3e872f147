package status

import (
	"log/slog"
	"net"

	"github.com/kvp2p/kvp2p/internal/metrics"
	"github.com/kvp2p/kvp2p/internal/metrics/prom"
)

// Listen serves a node's metrics (from src), status page and probes on
// addr (a node's metrics_addr), if set. The returned func stops the server; call it
// even on error.
func Listen(addr string, src metrics.Source, log *slog.Logger) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return func() {}, err // net's message names the address
	}
	srv := Start(ln, NewHandler(src, prom.NewRegistry(src, nil)))
	log.Info("metrics and status", "addr", ln.Addr().String())
	return func() { _ = srv.Close() }, nil
}
