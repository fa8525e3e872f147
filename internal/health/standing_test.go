package health

import (
	"testing"
	"time"
)

// TestStandingEveryPolicy: every policy answers Standing.
func TestStandingEveryPolicy(t *testing.T) {
	for _, name := range Names() {
		p, err := New(name, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := p.(Standing); !ok {
			t.Errorf("%s does not implement Standing", name)
		}
	}
}

// TestDomainStanding: a peer in a suspect domain, and one never seen, are
// not in good standing; asking changes nothing (no probe starts).
func TestDomainStanding(t *testing.T) {
	f := newDfix(t, Options{})
	a, b := Peer{ID: "h:1", Domain: "pod"}, Peer{ID: "h:2", Domain: "pod"}
	other := Peer{ID: "h:9", Domain: "pod2"}
	f.up(at(0), a, b, other)
	for _, p := range []Peer{a, b, other} {
		if !f.d.InGoodStanding(at(0), p) {
			t.Fatalf("%s not in good standing before any fault", p.ID)
		}
	}
	if f.d.InGoodStanding(at(0), Peer{ID: "h:5", Domain: "pod"}) {
		t.Fatal("a peer with no session is in good standing")
	}
	f.fault(at(time.Second), a) // pod turns suspect: b is probed
	f.wantProbes("fault", "h:2")
	if f.d.InGoodStanding(at(time.Second), b) {
		t.Fatal("a peer of a suspect domain is in good standing")
	}
	if !f.d.InGoodStanding(at(time.Second), other) {
		t.Fatal("a peer of another domain lost its standing")
	}
	f.wantNothing("InGoodStanding")
	f.ok()
}
