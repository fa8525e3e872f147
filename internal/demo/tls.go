package demo

import (
	"net"
	"os"
	"strings"
	"sync"

	"github.com/kvp2p/kvp2p/internal/node"
	"github.com/kvp2p/kvp2p/internal/testpki"
)

// demoTLS is demo --tls: a throwaway CA made in process, and for each rank
// a certificate naming its label's host (10.0.0.x) and its rank
// (node.RankURI of the label, its peer id), written to a temporary
// directory that close removes. Nothing here is ever committed.
type demoTLS struct {
	ca  *testpki.CA
	dir string

	mu    sync.Mutex // ranks restart from the fault goroutine
	files map[string]node.TLSConfig
}

func newDemoTLS() (*demoTLS, error) {
	ca, err := testpki.NewCA("kvp2p demo CA")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "kvp2p-demo-tls-")
	if err != nil {
		return nil, err
	}
	return &demoTLS{ca: ca, dir: dir, files: map[string]node.TLSConfig{}}, nil
}

// forRank returns the rank's TLS config (zero for a nil demoTLS); a
// restarted rank keeps its certificate.
func (d *demoTLS) forRank(rk *demoRank) (node.TLSConfig, error) {
	if d == nil {
		return node.TLSConfig{}, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.files[rk.id]; ok {
		return c, nil
	}
	host, _, err := net.SplitHostPort(rk.label)
	if err != nil {
		return node.TLSConfig{}, err
	}
	f, err := d.ca.WriteFiles(d.dir, strings.ReplaceAll(rk.id, "/", "-"), host, node.RankURI(rk.label))
	if err != nil {
		return node.TLSConfig{}, err
	}
	c := node.TLSConfig{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA}
	d.files[rk.id] = c
	return c, nil
}

func (d *demoTLS) close() { os.RemoveAll(d.dir) }
