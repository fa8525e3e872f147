package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvp2p/kvp2p/internal/metrics"
	"github.com/kvp2p/kvp2p/internal/metrics/prom"
)

// Paths served.
const (
	PathMetrics = "/metrics"
	PathJSON    = "/status.json"
	PathHealthz = "/healthz"
	PathReadyz  = "/readyz"
)

// NewHandler serves src's node. reg is the node's registry
// (prom.NewRegistry); nil builds one over src.
func NewHandler(src metrics.Source, reg *prometheus.Registry) http.Handler {
	if reg == nil {
		reg = prom.NewRegistry(src, nil)
	}
	page := newPage()
	mux := http.NewServeMux()
	mux.Handle("GET "+PathMetrics, promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET "+PathJSON, func(w http.ResponseWriter, r *http.Request) {
		s, err := take(r.Context(), src)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s)
	})
	mux.HandleFunc("GET "+PathHealthz, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok") // the process answers: that is all liveness means
	})
	mux.HandleFunc("GET "+PathReadyz, func(w http.ResponseWriter, r *http.Request) {
		s, err := take(r.Context(), src)
		switch {
		case err != nil:
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
		case !s.Node.Listening:
			http.Error(w, "not ready: not listening", http.StatusServiceUnavailable)
		case !s.Node.Ready():
			http.Error(w, "not ready: waiting for the engine to register", http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, "ready")
		}
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		s, err := take(r.Context(), src)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if err := renderPage(page, w, s); err != nil {
			// Headers are gone; the page is cut short, which is all we can say.
			return
		}
	})
	return mux
}

func take(ctx context.Context, src metrics.Source) (*metrics.Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, metrics.ScrapeTimeout)
	defer cancel()
	return src(ctx)
}

// Server is the HTTP server on a node's metrics address.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan error
}

// Start serves h on ln until Close.
func Start(ln net.Listener, h http.Handler) *Server {
	s := &Server{
		srv:  &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second},
		ln:   ln,
		done: make(chan error, 1),
	}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s
}

// Addr is the address served.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops serving and waits for the server goroutine.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = s.srv.Close() // handlers still running past the grace: cut them off
	}
	if serr := <-s.done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
