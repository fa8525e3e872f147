package kvp2p

import (
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
)

// TestNamesRank: a certificate speaks for a rank only if it names the
// whole peer id, port included; the host alone, another port, or a look-
// alike URI names nothing.
func TestNamesRank(t *testing.T) {
	f := newTLSFleet(t)
	cert := func(names ...string) *x509.Certificate {
		l, err := f.ca.Issue(names...)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := pem.Decode(l.CertPEM)
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	const id = "10.0.0.1:7777"
	for _, tc := range []struct {
		names []string
		want  bool
	}{
		{[]string{"10.0.0.1", "kvp2p://10.0.0.1:7777"}, true},
		{[]string{"node-a.pod.local", "kvp2p://NODE-A.pod.local:7777"}, false}, // another host than the id's
		{[]string{"10.0.0.1", "spiffe://prod/ns/llm/kvp2p/10.0.0.1/7777"}, true},
		{[]string{"10.0.0.1"}, false},                                       // the host alone: a sibling's certificate
		{[]string{"10.0.0.1", "kvp2p://10.0.0.1:7778"}, false},              // a sibling rank
		{[]string{"10.0.0.1", "kvp2p://10.0.0.1:7777/x"}, false},            // a path is not a rank
		{[]string{"10.0.0.1", "kvp2p://10.0.0.1"}, false},                   // no port
		{[]string{"10.0.0.1", "https://10.0.0.1:7777"}, false},              // another scheme
		{[]string{"10.0.0.1", "spiffe://prod/kvp2p/10.0.0.1/77777"}, false}, // another port
		{[]string{"10.0.0.1", "spiffe://prod/kvp2p/10.0.0.10/7777"}, false},
	} {
		if got := namesRank(cert(tc.names...), id); got != tc.want {
			t.Errorf("%v names %s: %v, want %v", tc.names, id, got, tc.want)
		}
	}
	if !namesRank(cert("node-a.pod.local", "kvp2p://NODE-A.pod.local:7777"), "node-a.pod.local:7777") {
		t.Error("host names compare without case")
	}
	if !namesRank(cert("::1", "kvp2p://[::1]:7777"), "[::1]:7777") {
		t.Error("an IPv6 rank")
	}
}

// TestTrustModelLogged: the node says at start what proves identity.
func TestTrustModelLogged(t *testing.T) {
	f := newTLSFleet(t)
	plain := startTN(t, nodeOpt{})
	waitLog(t, plain, "identity: plain TCP: a Hello's peer id must name its source address")
	trusting := startTN(t, nodeOpt{mut: func(c *Config) { c.TrustClaimedHost = true }})
	waitLog(t, trusting, "identity: plain TCP with trust_claimed_host")
	tls := startTN(t, nodeOpt{mut: f.rank(t)})
	waitLog(t, tls, "identity: mutual TLS, one certificate per rank")
	hostOnly := startTN(t, nodeOpt{mut: func(c *Config) { c.TLS = f.node(t, "127.0.0.1") }})
	waitLog(t, hostOnly, "this node's certificate names no rank")
	if strings.Contains(tls.logs.String(), "names no rank") {
		t.Error("a rank certificate reported as naming no rank")
	}
}
