package node

import (
	"crypto/tls"
	"net"
	"os"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// TestTLSFleetLoads: two nodes with mutual TLS load blocks intact.
func TestTLSFleetLoads(t *testing.T) {
	f := newTLSFleet(t)
	p := startTN(t, nodeOpt{mut: f.rank(t)})
	c := startTN(t, nodeOpt{mut: f.rank(t)})
	warm(t, c, p)
	ks := nodetest.Keys("tls", 4)
	storeAndLoad(t, c, p, "d1", "kv1", ks)
	checkBlocks(t, c.m, ks)
	c.m.RequestFinished("d1")
}

// TestTLSAllowList: a certificate from the right CA whose SANs match no
// allow_peers pattern gets no session.
func TestTLSAllowList(t *testing.T) {
	f := newTLSFleet(t)
	p := startTN(t, nodeOpt{mut: func(c *Config) {
		c.TLS = f.node(t, "127.0.0.1", RankURI(c.PeerID), "spiffe://test/kvp2p/producer")
		c.TLS.AllowPeers = "spiffe://test/kvp2p/*"
	}})
	c := startTN(t, nodeOpt{mut: func(c *Config) { c.TLS = f.node(t, "127.0.0.1", RankURI(c.PeerID), "spiffe://test/other/consumer") }})
	if err := c.m.NewRequest("d1", nodetest.PDParams(t, "kv1", p.PeerID())); err != nil {
		t.Fatal(err)
	}
	if v := waitVerdict(t, c.m, "d1", nodetest.Key("a", 0)); v != Miss {
		t.Fatalf("lookup = %v, want MISS (no session)", v)
	}
	waitLog(t, p, "not in allow_peers")
}

// TestTLSReloadOnSIGHUP: a consumer whose certificate the producer does not
// trust gets no session; once its files are replaced and reloaded, it does.
func TestTLSReloadOnSIGHUP(t *testing.T) {
	f := newTLSFleet(t)
	other := newTLSFleet(t)
	p := startTN(t, nodeOpt{mut: f.rank(t)})
	bad := other.node(t, "127.0.0.1")
	c := startTN(t, nodeOpt{mut: func(c *Config) { c.TLS = bad }})
	if err := c.m.NewRequest("d0", nodetest.PDParams(t, "kv0", p.PeerID())); err != nil {
		t.Fatal(err)
	}
	if v := waitVerdict(t, c.m, "d0", nodetest.Key("a", 0)); v != Miss {
		t.Fatalf("lookup = %v, want MISS (untrusted certificate)", v)
	}
	c.m.RequestFinished("d0")
	good := f.node(t, "127.0.0.1", RankURI(c.PeerID()))
	for _, mv := range [][2]string{{good.CertFile, bad.CertFile}, {good.KeyFile, bad.KeyFile}, {good.CAFile, bad.CAFile}} {
		b, err := os.ReadFile(mv[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(mv[1], b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	warm(t, c, p)
}

// TestTLSConfigValidation: all three files or none.
func TestTLSConfigValidation(t *testing.T) {
	for _, c := range []TLSConfig{
		{CertFile: "a"},
		{CertFile: "a", KeyFile: "b"},
		{AllowPeers: "x"},
		{CertFile: "a", KeyFile: "b", CAFile: "c", AllowPeers: "[x"},
	} {
		cfg := Config{PeerID: "127.0.0.1:1", TLS: c}
		if err := cfg.Validate(); err == nil {
			t.Errorf("%+v: accepted", c)
		}
	}
	if _, err := New(Config{PeerID: "127.0.0.1:1", TLS: TLSConfig{CertFile: "/nonexistent", KeyFile: "/x", CAFile: "/y"}}); err == nil {
		t.Error("missing files accepted")
	}
}

// TestTLSDataAttachBoundToControlIdentity: a data connection whose
// certificate differs from its control connection's (both valid for the
// claimed host) never completes the session: the halves are not paired,
// and both are closed at the handshake timeout.
func TestTLSDataAttachBoundToControlIdentity(t *testing.T) {
	f := newTLSFleet(t)
	p := startTN(t, nodeOpt{mut: func(c *Config) {
		c.TLS = f.node(t, "127.0.0.1", RankURI(c.PeerID))
		c.Timers.HandshakeTimeout = 300 * time.Millisecond
	}})
	dial := func(tc *tls.Config) net.Conn {
		nc, err := tls.Dial("tcp", p.PeerID(), tc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		return nc
	}
	claim := "127.0.0.1:1"
	ctl := dial(f.client(t, "127.0.0.1", RankURI(claim)))
	data := dial(f.client(t, "127.0.0.1", RankURI(claim), "other.test"))
	h, a := halves(claim, 1, 0)
	b, _ := wire.Append(nil, h)
	ctl.Write(b)
	b, _ = wire.Append(nil, a)
	data.Write(b)
	rd := wire.NewReader(ctl, wire.DefaultLimits())
	_ = ctl.SetReadDeadline(time.Now().Add(5 * time.Second))
	if m, err := rd.Next(); err == nil {
		t.Fatalf("the node answered %v: the mismatched halves made a session", m.Type())
	}
}
