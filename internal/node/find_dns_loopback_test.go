package node

import (
	"context"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest"
)

// serveDNS is a tiny DNS server on 127.0.0.1 (UDP) for one name: it
// answers A queries for name with addrs (IPv4), anything else with no
// records. It runs until the test ends.
func serveDNS(t *testing.T, name string, addrs []net.IP) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { pc.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if resp := dnsAnswer(buf[:n], name, addrs); resp != nil {
				_, _ = pc.WriteTo(resp, from)
			}
		}
	}()
	return pc.LocalAddr().String()
}

// dnsAnswer builds the response to one query (RFC 1035 §4.1); nil for a
// query it cannot read.
func dnsAnswer(q []byte, name string, addrs []net.IP) []byte {
	if len(q) < 12 || binary.BigEndian.Uint16(q[4:]) != 1 {
		return nil
	}
	// The question: labels up to a zero, then type and class.
	i, qname := 12, ""
	for i < len(q) && q[i] != 0 {
		l := int(q[i])
		if i+1+l > len(q) {
			return nil
		}
		qname += string(q[i+1:i+1+l]) + "."
		i += 1 + l
	}
	if i+5 > len(q) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(q[i+1:])
	question := q[12 : i+5]
	var ans []net.IP
	if qname == name && qtype == 1 {
		ans = addrs
	}
	r := make([]byte, 12, 512)
	copy(r, q[:2])                            // id
	binary.BigEndian.PutUint16(r[2:], 0x8180) // a response, recursion desired and available, no error
	binary.BigEndian.PutUint16(r[4:], 1)
	binary.BigEndian.PutUint16(r[6:], uint16(len(ans)))
	r = append(r, question...)
	for _, a := range ans {
		r = append(r, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4) // the question's name, A, IN, TTL 5 s, 4 bytes
		r = append(r, a.To4()...)
	}
	return r
}

// TestFindDNSLoopback: three nodes on 127.0.0.1-3 (one port) learn each
// other from a headless-Service-like DNS name served on loopback, share
// summaries, and one finds the prefix another holds; the summary metrics
// say what was exchanged.
func TestFindDNSLoopback(t *testing.T) {
	hosts := []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}
	lns, port := listenSamePort(t, hosts)
	ips := make([]net.IP, len(hosts))
	for i, h := range hosts {
		ips[i] = net.ParseIP(h)
	}
	dnsAddr := serveDNS(t, "kvp2p.test.", ips)
	res := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", dnsAddr)
	}}
	ns := make([]*tnode, len(lns))
	for i, ln := range lns {
		ns[i] = startTN(t, nodeOpt{wrapLn: func(l net.Listener) net.Listener { l.Close(); return ln }, mut: func(c *Config) {
			c.PeerID = ln.Addr().String()
			c.TrustClaimedHost = true // every dial's source is 127.0.0.1
			c.Find = FindConfig{Enabled: true, DNS: "kvp2p.test.:" + port, Resolver: res,
				Interval: 50 * time.Millisecond, DNSInterval: 100 * time.Millisecond,
				MaxAge: 2 * time.Second} // a busy machine's loop may lag more than three intervals
		}})
	}
	a, c := ns[0], ns[2]
	held := nodetest.Keys("dns", 5)
	for _, k := range held {
		if err := a.m.PutBlock(k, nodetest.Bytes(k)); err != nil {
			t.Fatal(err)
		}
	}
	nodetest.WaitFor(t, func() bool {
		f, ok := c.m.FindSource(held, 0)
		return ok && f.Peer == a.PeerID() && f.Blocks == len(held)
	})
	for _, n := range ns {
		var s *Snapshot
		nodetest.WaitFor(t, func() bool {
			var err error
			if s, err = n.Status(context.Background()); err != nil {
				t.Fatal(err)
			}
			return s.Find.PeersUsable == 2
		})
		sc := s.Counters.Summaries
		if s.Find.Members != 2 || sc.Applied == 0 || sc.BytesIn == 0 || sc.BytesOut == 0 || s.Find.OldestSec > 5 {
			t.Errorf("%s: find %+v, counts %+v", n.PeerID(), s.Find, sc)
		}
	}
}

// listenSamePort listens on one port of every host, trying a few ports.
func listenSamePort(t *testing.T, hosts []string) ([]net.Listener, string) {
	t.Helper()
	for range 10 {
		first, err := net.Listen("tcp", net.JoinHostPort(hosts[0], "0"))
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(first.Addr().String())
		lns := []net.Listener{first}
		for _, h := range hosts[1:] {
			ln, err := net.Listen("tcp", net.JoinHostPort(h, port))
			if err != nil {
				break
			}
			lns = append(lns, ln)
		}
		if len(lns) == len(hosts) {
			return lns, port
		}
		for _, ln := range lns {
			ln.Close()
		}
	}
	t.Skip("no port free on every loopback address")
	return nil, ""
}
