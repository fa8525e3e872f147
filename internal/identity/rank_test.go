package identity

import (
	"crypto/x509"
	"encoding/pem"
	"testing"

	"github.com/kvp2p/kvp2p/internal/nodetest"
)

// TestNamesRank: a certificate speaks for a rank only if it names the
// whole peer id, port included; the host alone, another port, or a look-
// alike URI names nothing.
func TestNamesRank(t *testing.T) {
	f := nodetest.NewTLSFleet(t)
	cert := func(names ...string) *x509.Certificate {
		l, err := f.CA.Issue(names...)
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
		if got := NamesRank(cert(tc.names...), id); got != tc.want {
			t.Errorf("%v names %s: %v, want %v", tc.names, id, got, tc.want)
		}
	}
	if !NamesRank(cert("node-a.pod.local", "kvp2p://NODE-A.pod.local:7777"), "node-a.pod.local:7777") {
		t.Error("host names compare without case")
	}
	if !NamesRank(cert("::1", "kvp2p://[::1]:7777"), "[::1]:7777") {
		t.Error("an IPv6 rank")
	}
}
