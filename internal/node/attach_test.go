package node

import (
	"net"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/wire"
)

// loopbackPair returns both ends of one loopback TCP connection: the
// node's (server) and the test's (client).
func loopbackPair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return server, client
}

// TestStaleDataAttachNotPaired scripts what the fault lab saw after a heal
// (pod-partial under domain): the dialer gave up on connect attempt 1,
// whose DataAttach was stuck behind a blackhole; at the heal that
// DataAttach (and its FIN) arrives after attempt 2's Hello, before attempt
// 2's own DataAttach. Paired by peer and incarnation only, the session took
// the dead data connection: its first probe went unanswered and the
// session was closed (false fallbacks). Paired by attempt, attempt 2's
// session reads its own data connection and answers the probe.
//
// The accepted connections are handed to the loop as events, in this
// order, so the interleaving is the same on every run.
func TestStaleDataAttachNotPaired(t *testing.T) {
	n := startNode(t, func(c *Config) { c.Timers.HandshakeTimeout = 2 * time.Second })
	const claim, inc = "127.0.0.1:9", 7
	lim := wire.DefaultLimits()
	accept := func(first wire.Message) net.Conn {
		srv, cli := loopbackPair(t)
		n.post(evAccepted{nc: srv, raw: srv, rd: wire.NewReader(srv, lim), first: first})
		return cli
	}
	_, staleAttach := halves(claim, inc, 1)
	hello, freshAttach := halves(claim, inc, 2)
	accept(hello)
	stale := accept(staleAttach)
	fresh := accept(freshAttach)
	stale.Close() // the abandoned attempt's FIN, right behind its DataAttach

	b, err := wire.Append(nil, &wire.Probe{Seq: 5})
	if err != nil {
		t.Fatal(err)
	}
	_ = fresh.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fresh.Write(b); err != nil {
		t.Fatal(err)
	}
	// Unpaired, the fresh data connection is dropped at the handshake
	// timeout: the read ends in EOF, not in a deadline.
	m, err := wire.NewReader(fresh, lim).Next()
	if err != nil {
		t.Fatalf("attempt 2's data connection: %v; want ProbeAck (paired with attempt 1's?)", err)
	}
	if a, ok := m.(*wire.ProbeAck); !ok || a.Seq != 5 {
		t.Fatalf("attempt 2's data connection answered %#v; want ProbeAck{5}", m)
	}
}
