package bench

import (
	"context"
	"os"

	"github.com/kvp2p/kvp2p"
	"github.com/kvp2p/kvp2p/internal/testpki"
)

// tlsPair is bench --tls: a producer and a consumer with mutual TLS, the
// certificates made in process (a throwaway CA) in a temporary directory
// removed at close.
type tlsPair struct {
	prod, cons *benchNode
	dir        string
}

func newTLSPair(ctx context.Context, block int, keys []kvp2p.Key) (p *tlsPair, err error) {
	dir, err := os.MkdirTemp("", "kvp2p-bench-tls-")
	if err != nil {
		return nil, err
	}
	p = &tlsPair{dir: dir}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	ca, err := testpki.NewCA("kvp2p bench CA")
	if err != nil {
		return nil, err
	}
	for i, dst := range []**benchNode{&p.prod, &p.cons} {
		f, err := ca.WriteFiles(dir, []string{"prod", "cons"}[i], "127.0.0.1")
		if err != nil {
			return nil, err
		}
		n, err := startBenchNode(block, max(len(keys), 16), kvp2p.TLSConfig{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA})
		if err != nil {
			return nil, err
		}
		*dst = n
	}
	for _, k := range keys {
		if err := p.prod.m.PutBlock(k, benchBlock(k, block)); err != nil {
			return nil, err
		}
	}
	if err := warmSession(ctx, p.cons, p.prod); err != nil {
		return nil, err
	}
	if _, err := loadOnce(ctx, p.prod, p.cons, keys, "warm"); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *tlsPair) close() {
	if p.cons != nil {
		p.cons.stop()
	}
	if p.prod != nil {
		p.prod.stop()
	}
	os.RemoveAll(p.dir)
}
