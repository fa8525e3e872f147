package status

import (
	"log/slog"
	"net"
	"net/http"

	"github.com/kvp2p/kvp2p/internal/metrics"
	"github.com/kvp2p/kvp2p/internal/metrics/prom"
)

// Listen serves a node's metrics (from src), status page and probes on
// addr (a node's metrics_addr), if set, and GET /v1/prefix when prefix is
// not nil. The returned func stops the server; call it even on error.
func Listen(addr string, src metrics.Source, log *slog.Logger, prefix PrefixFunc) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return func() {}, err // net's message names the address
	}
	var h http.Handler = NewHandler(src, prom.NewRegistry(src, nil))
	if prefix != nil {
		mux := http.NewServeMux()
		mux.Handle("GET "+PathPrefix, PrefixHandler(prefix))
		mux.Handle("/", h)
		h = mux
	}
	srv := Start(ln, h)
	log.Info("metrics and status", "addr", ln.Addr().String())
	return func() { _ = srv.Close() }, nil
}
