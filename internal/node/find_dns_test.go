package node

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest"
)

// fakeResolver answers from a table the test changes; a name missing from
// it does not exist, a name mapped to fail fails.
type fakeResolver struct {
	mu    sync.Mutex
	addrs map[string][]netip.Addr
	fail  map[string]bool
	asked int
}

func (r *fakeResolver) set(host string, addrs ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addrs[host] = nil
	for _, a := range addrs {
		r.addrs[host] = append(r.addrs[host], netip.MustParseAddr(a))
	}
}

func (r *fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked++
	if network != "ip" {
		return nil, errors.New("want network ip")
	}
	if r.fail[host] {
		return nil, &net.DNSError{Err: "server misbehaving", Name: host, IsTemporary: true}
	}
	a, ok := r.addrs[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return slices.Clone(a), nil
}

// TestResolveLoop: in a synctest bubble, the DNS goroutine resolves every
// entry at once and then every interval, posts peer ids in canonical form
// (an IPv4-mapped address as IPv4, IPv6 bracketed), an empty answer for a
// name with no records and an error for a failed lookup, and ends when
// stop closes.
func TestResolveLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &fakeResolver{addrs: map[string][]netip.Addr{}, fail: map[string]bool{"broken.svc": true}}
		r.set("kvp2p.svc", "10.0.0.2", "::ffff:10.0.0.3", "fd00::1")
		entries, err := parseDNSEntries("kvp2p.svc:7600,gone.svc:7600,broken.svc:7600")
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var got []evResolved
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			resolveLoop(r, entries, 10*time.Second, stop, func(ev evResolved) { mu.Lock(); got = append(got, ev); mu.Unlock() })
		}()
		synctest.Wait()
		mu.Lock()
		if len(got) != 3 {
			t.Fatalf("%d answers at start, want 3: %+v", len(got), got)
		}
		if want := []string{"10.0.0.2:7600", "10.0.0.3:7600", "[fd00::1]:7600"}; !slices.Equal(got[0].peers, want) || got[0].err != nil {
			t.Errorf("kvp2p.svc: %+v, want %v", got[0], want)
		}
		if got[1].peers != nil || got[1].err != nil || got[1].entry != "gone.svc:7600" {
			t.Errorf("a name with no records: %+v, want an empty answer", got[1])
		}
		if got[2].err == nil {
			t.Errorf("a failed lookup: %+v, want its error", got[2])
		}
		mu.Unlock()
		r.set("kvp2p.svc", "10.0.0.2")
		time.Sleep(9 * time.Second) // the fake clock: nothing before the interval
		synctest.Wait()
		mu.Lock()
		if len(got) != 3 {
			t.Fatalf("%d answers before the interval", len(got))
		}
		mu.Unlock()
		time.Sleep(time.Second)
		synctest.Wait()
		mu.Lock()
		if len(got) != 6 || !slices.Equal(got[3].peers, []string{"10.0.0.2:7600"}) {
			t.Fatalf("after one interval: %+v", got)
		}
		mu.Unlock()
		close(stop)
		<-done
	})
}

// TestFindDNSMembership: a node's members follow what the resolver says,
// merged with find.peers; a member that leaves DNS is still dialed for the
// grace period (two lookups that lack it), then dropped; max_peers, not
// set, grows with the members.
func TestFindDNSMembership(t *testing.T) {
	r := &fakeResolver{addrs: map[string][]netip.Addr{}}
	r.set("kvp2p.svc", "127.0.0.2", "127.0.0.3")
	n := startTN(t, nodeOpt{mut: func(c *Config) {
		c.Find = FindConfig{Enabled: true, Peers: "127.0.0.9:1", DNS: "kvp2p.svc:7600", Resolver: r,
			Interval: 20 * time.Millisecond, DNSInterval: 50 * time.Millisecond, DNSGrace: time.Hour}
	}})
	members := func() int {
		s, err := n.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if s.Node.MaxPeers != 128+s.Find.Members {
			t.Fatalf("max_peers %d with %d members, want 128 more", s.Node.MaxPeers, s.Find.Members)
		}
		return s.Find.Members
	}
	nodetest.WaitFor(t, func() bool { return members() == 3 }) // the two DNS members and the static one
	r.set("kvp2p.svc", "127.0.0.2")
	asked := func() int { r.mu.Lock(); defer r.mu.Unlock(); return r.asked }
	a := asked()
	nodetest.WaitFor(t, func() bool { return asked() >= a+3 })
	if m := members(); m != 3 {
		t.Fatalf("%d members within the grace period, want 3", m)
	}
}

// TestFindDNSMemberLeaves: a member DNS stops naming is dropped once the
// grace period has passed, and the peer cap follows.
func TestFindDNSMemberLeaves(t *testing.T) {
	r := &fakeResolver{addrs: map[string][]netip.Addr{}}
	r.set("kvp2p.svc", "127.0.0.2", "127.0.0.3")
	n := startTN(t, nodeOpt{mut: func(c *Config) {
		c.Find = FindConfig{Enabled: true, DNS: "kvp2p.svc:7600", Resolver: r,
			Interval: 20 * time.Millisecond, DNSInterval: 20 * time.Millisecond, DNSGrace: 100 * time.Millisecond}
	}})
	status := func() *Snapshot {
		s, err := n.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	nodetest.WaitFor(t, func() bool { return status().Find.Members == 2 })
	r.set("kvp2p.svc", "127.0.0.2")
	nodetest.WaitFor(t, func() bool { return status().Find.Members == 1 })
	if s := status(); s.Node.MaxPeers != 129 {
		t.Fatalf("max_peers %d with one member, want 129", s.Node.MaxPeers)
	}
}

// TestFindSetMaxPeersKept: a max_peers the operator set is kept with find
// on, and members over it are said once, not every interval.
func TestFindSetMaxPeersKept(t *testing.T) {
	n := startTN(t, nodeOpt{mut: func(c *Config) {
		c.Timers.MaxPeers = 2
		c.Find = FindConfig{Enabled: true, Peers: "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", Interval: 20 * time.Millisecond}
	}})
	const warn = "more members than timers.max_peers allows"
	nodetest.WaitFor(t, func() bool { return strings.Contains(n.logs.String(), warn) })
	s, err := n.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	before := s.Node.UptimeSec
	for s.Node.UptimeSec < before+0.2 { // ten intervals more
		if s, err = n.Status(context.Background()); err != nil {
			t.Fatal(err)
		}
		<-time.After(10 * time.Millisecond)
	}
	if s.Node.MaxPeers != 2 || s.Find.Members != 3 {
		t.Fatalf("max_peers %d, members %d: want the set 2, and 3", s.Node.MaxPeers, s.Find.Members)
	}
	if c := strings.Count(n.logs.String(), warn); c != 1 {
		t.Fatalf("warned %d times, want once", c)
	}
}
