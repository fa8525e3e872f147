package health

import "testing"

func TestHostOf(t *testing.T) {
	for _, tc := range []struct{ id, host string }{
		{"10.0.0.1:7777", "10.0.0.1"},
		{"10.0.0.1:7778", "10.0.0.1"},
		{"node-a.pod.svc:7777", "node-a.pod.svc"},
		{"localhost:1", "localhost"},
		{"[::1]:7777", "::1"},
		{"[fe80::1%eth0]:7777", "fe80::1%eth0"},
		{"[2001:db8::2]:80", "2001:db8::2"},
		{"host:", "host"},
		{"fe80::1:7777", "fe80::1"}, // unbracketed IPv6: the last colon, as vLLM splits
		{"10.0.0.1", "10.0.0.1"},
		{"node-a", "node-a"},
		{"", ""},
	} {
		if got := HostOf(tc.id); got != tc.host {
			t.Errorf("HostOf(%q) = %q, want %q", tc.id, got, tc.host)
		}
	}
	// Ports of one host group together; different hosts never do.
	if HostOf("[::1]:7777") != HostOf("[::1]:7778") || HostOf("10.0.0.1:1") == HostOf("10.0.0.11:1") {
		t.Error("HostOf groups wrongly")
	}
}

func TestDomainOf(t *testing.T) {
	for _, tc := range []struct {
		p    Peer
		want string
	}{
		{Peer{ID: "10.0.0.1:7777", Domain: "pod-a"}, "pod-a"},
		{Peer{ID: "10.0.0.1:7778", Domain: "pod-a", Outbound: true}, "pod-a"},
		{Peer{ID: "10.0.0.1:7777"}, "peer:10.0.0.1:7777"},
	} {
		if got := DomainOf(tc.p); got != tc.want {
			t.Errorf("DomainOf(%+v) = %q, want %q", tc.p, got, tc.want)
		}
	}
	// The default never groups unrelated peers, not even ports of one host.
	a, b := Peer{ID: "10.0.0.1:7777"}, Peer{ID: "10.0.0.1:7778"}
	if DomainOf(a) == DomainOf(b) {
		t.Errorf("default domains of %q and %q coincide", a.ID, b.ID)
	}
	// Nor can a named domain be confused with a peer's default one.
	if DomainOf(Peer{ID: "x:1", Domain: "x:1"}) == DomainOf(Peer{ID: "x:1"}) {
		t.Error("a domain named like a peer id collides with its default domain")
	}
}
