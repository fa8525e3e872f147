package identity

import (
	"os"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest"
)

// nodeTLS returns a TLS config for a node whose certificate names names.
func nodeTLS(t testing.TB, f *nodetest.TLSFleet, names ...string) Config {
	fs := f.Files(t, names...)
	return Config{CertFile: fs.Cert, KeyFile: fs.Key, CAFile: fs.CA}
}

// rankCreds are a server's credentials for rank 127.0.0.1:1 and a
// client's, from one test CA.
func rankCreds(t testing.TB) (server, client *Creds) {
	t.Helper()
	f := nodetest.NewTLSFleet(t)
	server, err := NewCreds(nodeTLS(t, f, "127.0.0.1", RankURI("127.0.0.1:1")))
	if err != nil {
		t.Fatal(err)
	}
	client, err = NewCreds(nodeTLS(t, f, "127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	return server, client
}

// TestTLSReloadWhenFilesChange: files are checked (at most once a second)
// and reloaded when they change; a broken file keeps the old material.
func TestTLSReloadWhenFilesChange(t *testing.T) {
	f := nodetest.NewTLSFleet(t)
	cfg := nodeTLS(t, f, "127.0.0.1")
	cr, err := NewCreds(cfg)
	if err != nil {
		t.Fatal(err)
	}
	first := cr.cur.Load()
	t0 := time.Now()
	if err := cr.MaybeReload(t0); err != nil { // nothing changed
		t.Fatal(err)
	}
	if cr.cur.Load() != first {
		t.Fatal("reloaded unchanged files")
	}
	l, err := f.CA.Issue("127.0.0.1", "renewed.test")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.CertFile, l.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.KeyFile, l.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cr.MaybeReload(t0.Add(500 * time.Millisecond)); err != nil || cr.cur.Load() != first {
		t.Fatalf("checked again within a second: err %v", err)
	}
	if err := cr.MaybeReload(t0.Add(2 * time.Second)); err != nil {
		t.Fatal(err)
	}
	second := cr.cur.Load()
	if second == first {
		t.Fatal("changed files not reloaded")
	}
	if err := os.WriteFile(cfg.CAFile, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cr.MaybeReload(t0.Add(4 * time.Second)); err == nil {
		t.Fatal("a broken CA file reloaded without error")
	}
	if cr.cur.Load() != second {
		t.Fatal("a broken CA file replaced the working material")
	}
}
