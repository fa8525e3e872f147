package loads_test

import (
	"strings"
	"testing"

	"github.com/kvp2p/kvp2p/internal/nodetest"

	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/sim"
)

// TestShortCapabilityLoggedOnce: a hand-off that names no decoder makes
// its kv_request_id the only key to its blocks; one shorter than 16
// characters is logged, once for the node, and a long one or a named
// decoder is not.
func TestShortCapabilityLoggedOnce(t *testing.T) {
	f := newFleet(t)
	p := f.node("10.0.0.1:7777", sim.NodeOpts{})
	for _, kv := range []string{"kv1", "kv2", "kv-0123456789abcdef"} {
		if err := p.T.NewRequest(f.net.Now, "p-"+kv, decoder(kv)); err != nil {
			t.Fatal(err)
		}
	}
	named := loads.TransferParams{RemoteDecoder: &loads.Remote{KVRequestID: "k3", RemoteHost: "10.0.0.2", RemotePort: 7777}}
	if err := p.T.NewRequest(f.net.Now, "p-named", named); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(f.log.String(), "kv_request_id is short"); n != 1 {
		t.Fatalf("short capability ids logged %d times, want once:\n%s", n, f.log.String())
	}
	if !strings.Contains(f.log.String(), "kv_req=kv1") {
		t.Fatal("the log does not name the short id")
	}
	bad := loads.TransferParams{RemoteDecoder: &loads.Remote{KVRequestID: "k4", RemoteHost: "10.0.0.2"}}
	if err := p.T.NewRequest(f.net.Now, "p-bad", bad); err == nil {
		t.Fatal("remote_decoder with a host and no port accepted")
	}
}

// TestHandoffNamedDecoderFirst: a thief's fetch comes before the
// prefiller's request, and binds; the request then names its decoder, so
// the thief's fetch fails at once and the decoder's, which came after,
// loads the blocks.
func TestHandoffNamedDecoderFirst(t *testing.T) {
	f := newFleet(t)
	p := f.node("10.0.0.1:7777", sim.NodeOpts{})
	thief := f.node("10.0.0.3:7777", sim.NodeOpts{})
	c := f.node("10.0.0.2:7777", sim.NodeOpts{})
	ks := nodetest.Keys("a", 4)
	const kv = "kv-0123456789abcdef"
	thief.T.NewRequest(f.net.Now, "t1", pd(kv, "10.0.0.1", 7777))
	f.net.Run()
	tj := thief.T.SubmitLoad(f.net.Now, "t1", ks)
	f.net.Run()
	named := loads.TransferParams{RemoteDecoder: &loads.Remote{KVRequestID: kv, RemoteHost: "10.0.0.2", RemotePort: 7777}}
	if err := p.T.NewRequest(f.net.Now, "p1", named); err != nil {
		t.Fatal(err)
	}
	f.net.Run()
	if r := f.mustResult(thief, tj); r.OK || r.Bytes != 0 {
		t.Fatalf("thief's load: %+v, want failed with 0 bytes", r)
	}
	c.T.NewRequest(f.net.Now, "d1", pd(kv, "10.0.0.1", 7777))
	f.net.Run()
	lj := c.T.SubmitLoad(f.net.Now, "d1", ks)
	f.net.Run()
	f.put(p, ks)
	sj := p.T.SubmitStore(f.net.Now, "p1", ks)
	if r := f.mustResult(c, lj); !r.OK {
		t.Fatalf("decoder's load: %+v", r)
	}
	if r := f.mustResult(p, sj); !r.OK {
		t.Fatalf("store: %+v", r)
	}
	f.verify(c, ks)
	if !strings.Contains(f.log.String(), "not its decoder") {
		t.Fatal("the prefiller did not say why it refused the thief")
	}
}

// TestCanonPeer: a decoder named by another spelling of its address is
// the same peer; a host name is kept as it is.
func TestCanonPeer(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.7:7600":          "10.0.0.7:7600",
		"[::ffff:10.0.0.7]:7600": "10.0.0.7:7600",
		"[2001:db8:0:0::1]:7600": "[2001:db8::1]:7600",
		"decoder-0.svc:7600":     "decoder-0.svc:7600",
	} {
		if got := loads.CanonPeer(in); got != want {
			t.Errorf("CanonPeer(%q) = %q, want %q", in, got, want)
		}
	}
}
