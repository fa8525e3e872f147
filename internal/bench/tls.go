package bench

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"fmt"
	"os"
	"time"

	"github.com/kvp2p/kvp2p/internal/node"
	"github.com/kvp2p/kvp2p/internal/testpki"
)

// tlsPair is bench --tls: a producer and a consumer with mutual TLS, the
// certificates made in process (a throwaway CA) in a temporary directory
// removed at close.
type tlsPair struct {
	prod, cons *benchNode
	dir        string
}

func newTLSPair(ctx context.Context, block int, keys []node.Key) (p *tlsPair, err error) {
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
		n, err := startBenchNode(block, max(len(keys), 16), func(id string) (node.TLSConfig, error) {
			f, err := ca.WriteFiles(dir, []string{"prod", "cons"}[i], "127.0.0.1", node.RankURI(id))
			return node.TLSConfig{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA}, err
		})
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

// aeadRecord is TLS's largest record payload: a load's records are all
// this size (the nodes turn dynamic record sizing off).
const aeadRecord = 16 << 10

// aeadRig seals and then opens bytes in full TLS records with AES-128-GCM,
// the AEAD TLS 1.3 negotiates between two nodes on AES hardware (Go does
// not let TLS 1.3's suite be chosen; AES-256-GCM costs about the same
// here and ChaCha20-Poly1305 more). Its CPU time is the floor of what TLS
// adds to a load when both ends share the machine: on a CPU-bound machine
// TLS/plain cannot beat plain/(plain + this), whatever the record layer
// around it does.
type aeadRig struct {
	aead     cipher.AEAD
	src, rec []byte
	nonce    [12]byte
	ad       [13]byte
}

func newAEADRig() (*aeadRig, error) {
	b, err := aes.NewCipher(make([]byte, 16))
	if err != nil {
		return nil, err
	}
	a, err := cipher.NewGCM(b)
	if err != nil {
		return nil, err
	}
	// A source bigger than the caches, as a load's slots are.
	src := make([]byte, 8<<20)
	for i := range src {
		src[i] = byte(i * 7)
	}
	return &aeadRig{aead: a, src: src, rec: make([]byte, 0, aeadRecord+a.Overhead())}, nil
}

// once seals and opens n bytes; the nonce never changes, which is fine for
// a cost measurement and nothing else.
func (r *aeadRig) once(n int64) (time.Duration, error) {
	start := time.Now()
	off := 0
	for left := n; left > 0; left -= aeadRecord {
		if off+aeadRecord > len(r.src) {
			off = 0
		}
		p := r.src[off : off+int(min(left, aeadRecord))]
		off += aeadRecord
		r.rec = r.aead.Seal(r.rec[:0], r.nonce[:], p, r.ad[:])
		// In place, as crypto/tls opens a record.
		if _, err := r.aead.Open(r.rec[:0], r.nonce[:], r.rec, r.ad[:]); err != nil {
			return 0, fmt.Errorf("aes-gcm: %w", err)
		}
	}
	return time.Since(start), nil
}
