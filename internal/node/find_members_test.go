package node

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMembersGrace: a peer DNS stops naming stays a member for the grace
// period after the first answer that lacked it, and comes back at once if
// an answer names it again; the static list is always there, each member
// once.
func TestMembersGrace(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	m := newMembers([]string{"s:1", "b:1"}, 30*time.Second)
	check := func(now time.Time, want ...string) {
		t.Helper()
		if got := m.list(now); !slices.Equal(got, want) {
			t.Fatalf("at %v: members %v, want %v", now.Sub(t0), got, want)
		}
	}
	m.resolved(at(0), "svc:1", []string{"c:1", "b:1", "a:1"})
	check(at(0), "s:1", "b:1", "a:1", "c:1")
	// c leaves DNS at 10 s: a member until 40 s.
	m.resolved(at(10), "svc:1", []string{"a:1", "b:1"})
	m.resolved(at(20), "svc:1", []string{"a:1", "b:1"})
	check(at(39.9), "s:1", "b:1", "a:1", "c:1")
	check(at(40), "s:1", "b:1", "a:1")
	// a flaps: gone at 50 s, back at 60 s, gone again at 70 s (the grace
	// counts from 70 s, not 50 s).
	m.resolved(at(50), "svc:1", []string{"b:1"})
	m.resolved(at(60), "svc:1", []string{"a:1", "b:1"})
	m.resolved(at(70), "svc:1", nil)
	check(at(99), "s:1", "b:1", "a:1")
	check(at(100), "s:1", "b:1") // b is static: DNS lacking it changes nothing
	if m.dnsSize != 0 {
		t.Fatalf("dnsSize %d after every DNS member left", m.dnsSize)
	}
}

// TestMembersEntriesAndBound: entries are answered apart (one entry's
// answer does not make another's peers absent), and DNS adds at most
// maxDNSMembers peers.
func TestMembersEntriesAndBound(t *testing.T) {
	now := time.Unix(0, 0)
	m := newMembers(nil, time.Second)
	m.resolved(now, "x:1", []string{"a:1"})
	m.resolved(now, "y:2", []string{"b:2"})
	if got := m.list(now.Add(time.Hour)); !slices.Equal(got, []string{"a:1", "b:2"}) {
		t.Fatalf("members %v", got)
	}
	many := make([]string, maxDNSMembers+5)
	for i := range many {
		many[i] = "10.0.0.1:" + strconv.Itoa(i+1)
	}
	if over := m.resolved(now, "z:3", many); over != 7 { // two places are a:1's and b:2's
		t.Fatalf("left out %d, want 7", over)
	}
	if n := len(m.list(now)); n != maxDNSMembers {
		t.Fatalf("%d members, want the bound %d", n, maxDNSMembers)
	}
}

func TestParseDNSEntries(t *testing.T) {
	es, err := parseDNSEntries(" kvp2p.ns.svc.cluster.local:7600, [::1]:7601 ,")
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 || es[0].host != "kvp2p.ns.svc.cluster.local" || es[0].port != "7600" || es[1].host != "::1" {
		t.Fatalf("%+v", es)
	}
	for _, bad := range []string{"kvp2p.ns.svc", "x:0", "x:70000", ":7600", "x:port"} {
		if _, err := parseDNSEntries(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	c := Config{PeerID: "127.0.0.1:1", Find: FindConfig{Enabled: true, DNS: "svc"}}
	if err := c.Validate(); err == nil {
		t.Error("Validate took find.dns without a port")
	}
	c.Find = FindConfig{Enabled: true, DNSGrace: -time.Second}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "find.dns_grace") {
		t.Errorf("a negative find.dns_grace: %v", err)
	}
}
