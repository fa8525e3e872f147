package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"

	"github.com/kvp2p/kvp2p/internal/metrics"
	"github.com/kvp2p/kvp2p/internal/metrics/prom"
	"github.com/kvp2p/kvp2p/internal/node"
	"github.com/kvp2p/kvp2p/internal/status"
)

// ServeStatus serves, for each policy's run, the metrics, status page
// and /status.json of its first consumer rank: policy i on addr's port + i.
// node returns a run's consumer node once the run started (nil before).
// The returned func stops the servers.
func ServeStatus(addr string, policies []string, node func(policy string) *node.Node, stdout io.Writer) (func(), error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	base, err := strconv.Atoi(p)
	if err != nil || (base == 0 && len(policies) > 1) {
		return nil, fmt.Errorf("--metrics-addr %s: want a fixed port (policy i gets port + i)", addr)
	}
	var srvs []*status.Server
	stop := func() {
		for _, s := range srvs {
			_ = s.Close()
		}
	}
	for i, pol := range policies {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(base+i)))
		if err != nil {
			stop()
			return nil, err
		}
		src := func(ctx context.Context) (*metrics.Snapshot, error) {
			n := node(pol)
			if n == nil {
				return nil, errors.New("the run has not started yet")
			}
			return n.Status(ctx)
		}
		srvs = append(srvs, status.Start(ln, status.NewHandler(src, prom.NewRegistry(src, nil))))
		fmt.Fprintf(stdout, "status of %s's first consumer: http://%s/ (kvp2p status --addr %s)\n", pol, ln.Addr(), ln.Addr())
	}
	return stop, nil
}
