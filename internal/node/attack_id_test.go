package node

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// Issue 25's identity attacks (#1, #2, #5), each by a hostile process on
// the victims' own host (127.0.0.1) speaking protocol version 3 by hand
// over real loopback sockets. Each must fail: forged bytes never load, and
// no KV reaches an attacker's connection. docs/security.md lists them.

// orderedPair starts two nodes and returns them as (producer, consumer)
// with the consumer's peer id sorting above the producer's: the side whose
// dial loses the simultaneous-dial tie-break.
func orderedPair(t *testing.T, mut func(*Config)) (p, c *tnode) {
	t.Helper()
	a := startTN(t, nodeOpt{mut: mut})
	b := startTN(t, nodeOpt{mut: mut})
	if a.PeerID() > b.PeerID() {
		a, b = b, a
	}
	return a, b
}

// learnIncarnation is what an attacker does to learn a node's incarnation:
// it opens a session to the node as anybody and reads the node's Hello.
func learnIncarnation(t *testing.T, target string, tc *tls.Config, claim string) uint64 {
	t.Helper()
	dial := func() net.Conn {
		nc, err := net.Dial("tcp", target)
		if err != nil {
			t.Fatal(err)
		}
		if tc != nil {
			nc = tls.Client(nc, tc)
		}
		_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
		return nc
	}
	ctl, data := dial(), dial()
	defer ctl.Close()
	defer data.Close()
	h, a := halves(claim, 0x5EE, 1)
	for _, w := range []struct {
		nc net.Conn
		m  wire.Message
	}{{ctl, h}, {data, a}} {
		b, _ := wire.Append(nil, w.m)
		if _, err := w.nc.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	m, err := wire.NewReader(ctl, wire.DefaultLimits()).Next()
	if err != nil {
		t.Fatalf("reading the target's Hello: %v", err)
	}
	th, ok := m.(*wire.Hello)
	if !ok {
		t.Fatalf("the target answered %v, not its Hello", m.Type())
	}
	return th.Incarnation
}

// counters is n's status counters.
func counters(t *testing.T, n *tnode) (replaced, refused uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := n.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s.Counters.SessionReplacements, s.Counters.TakeoversRefused
}

// TestAttackTieBreakTakeover is attack #1: a process on the producer's
// host claims the producer's peer id and its current incarnation (read
// from the producer's own Hello) to a consumer whose id sorts above the
// producer's. The simultaneous-dial tie-break used to replace the
// consumer's live, ready session with the attacker's at once, and a PD
// load and symmetric lookups of keys the producer never had loaded the
// attacker's bytes as OK. Now the live session is probed first; the real
// producer answers and the attacker is refused, counted, and served
// nothing. Under TLS the attacker holds a certificate for the producer's
// very rank (a second process with its key): the probe still refuses it.
func TestAttackTieBreakTakeover(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		name := map[bool]string{false: "plain TCP", true: "TLS, the producer's own certificate"}[useTLS]
		t.Run(name, func(t *testing.T) {
			f := newTLSFleet(t)
			var mut func(*Config)
			if useTLS {
				mut = f.rank(t)
			}
			p, c := orderedPair(t, mut)
			warm(t, c, p) // the consumer's own dial: live and ready
			var tc *tls.Config
			if useTLS {
				tc = f.client(t, "127.0.0.1", RankURI(p.PeerID()))
			}
			inc := learnIncarnation(t, p.PeerID(), tc, p.PeerID())
			if inc != p.cfg.Incarnation {
				t.Fatalf("learned incarnation %x, the producer's is %x", inc, p.cfg.Incarnation)
			}
			sp := startSpooferAs(t, c.PeerID(), p.PeerID(), inc, tc)
			select {
			case <-sp.ended:
			case <-time.After(5 * time.Second):
				t.Fatal("the impostor was neither refused nor answered")
			}
			select {
			case <-sp.ready:
				t.Fatal("the impostor was acknowledged")
			default:
			}
			if replaced, refused := counters(t, c); replaced != 0 || refused != 1 {
				t.Fatalf("replacements %d, refused takeovers %d; want 0 and 1", replaced, refused)
			}
			waitLog(t, c, "the live session answered its probe")

			// A PD load and three symmetric lookups of keys the producer
			// never had: the real producer's bytes, and MISS.
			ks := nodetest.Keys("tie", 2)
			storeBlocks(t, p, "kv1", ks)
			pdLoad(t, c, p, "d1", "kv1", ks)
			checkBlocks(t, c.m, ks)
			c.m.RequestFinished("d1")
			absent := nodetest.Keys("never", 3)
			if err := c.m.NewRequest("s1", nodetest.SymParams(t, "kv-s1", p.PeerID())); err != nil {
				t.Fatal(err)
			}
			for i, v := range lookupAll(t, c.m, "s1", absent) {
				if v != Miss {
					t.Fatalf("symmetric lookup %d of a key the producer never had = %v, want MISS", i, v)
				}
			}
			c.m.RequestFinished("s1")
			if n := sp.fetches.Load(); n != 0 {
				t.Fatalf("the impostor was sent %d fetches", n)
			}
		})
	}
}

// TestAttackAttachHijack is attack #2: the attacker learns the consumer's
// connect-attempt counter from the consumer's own dial to it, then sends a
// DataAttach to the producer for each of the consumer's next attempts,
// with a MAC made from the secret the consumer sent it (the only secret it
// knows). Paired by the guessable key alone, the producer used to send the
// consumer's KV down the attacker's data connections. Now each attach
// parks under its own MAC and pairs with nothing: the consumer's loads
// succeed and not a byte reaches the attacker.
func TestAttackAttachHijack(t *testing.T) {
	p, c := orderedPair(t, func(cfg *Config) { cfg.Timers.HandshakeTimeout = time.Second })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	// The bait: a request naming the attacker as its source makes the
	// consumer dial it.
	host, port := nodetest.SplitPeer(t, ln.Addr().String())
	bait := TransferParams{RemotePrefiller: &Remote{KVRequestID: "kv-bait", RemoteHost: host, RemotePort: port}}
	if err := c.m.NewRequest("bait", bait); err != nil {
		t.Fatal(err)
	}
	c.m.Lookup("bait", nodetest.Key("bait", 0))
	var hello *wire.Hello
	var attach *wire.DataAttach
	for hello == nil || attach == nil {
		nc, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		m, err := wire.NewReader(nc, wire.DefaultLimits()).Next()
		if err != nil {
			t.Fatal(err)
		}
		switch m := m.(type) {
		case *wire.Hello:
			hello = m
		case *wire.DataAttach:
			attach = m
		}
	}
	c.m.RequestFinished("bait")
	if hello.Attempt != attach.Attempt || hello.Secret == ([wire.SecretSize]byte{}) {
		t.Fatalf("the consumer's dial: Hello attempt %d secret %x, DataAttach attempt %d", hello.Attempt, hello.Secret, attach.Attempt)
	}

	// The forged attaches for the consumer's next attempts, sent before it
	// dials the producer.
	const guesses = 8
	var stolen []net.Conn
	for i := range uint64(guesses) {
		nc, err := net.Dial("tcp", p.PeerID())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		at := hello.Attempt + 1 + i
		b, _ := wire.Append(nil, &wire.DataAttach{PeerID: c.PeerID(), Incarnation: hello.Incarnation, Attempt: at,
			MAC: wire.AttachMAC(hello.Secret, c.PeerID(), hello.Incarnation, at)})
		if _, err := nc.Write(b); err != nil {
			t.Fatal(err)
		}
		stolen = append(stolen, nc)
	}
	nodetest.WaitFor(t, func() bool { return p.gate.len() >= guesses })

	warm(t, c, p)
	ks := nodetest.Keys("hijack", 4)
	storeBlocks(t, p, "kv2", ks)
	pdLoad(t, c, p, "d2", "kv2", ks)
	checkBlocks(t, c.m, ks)
	c.m.RequestFinished("d2")

	// Every forged attach is closed at the handshake timeout, unpaired,
	// having carried nothing.
	for i, nc := range stolen {
		_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := io.Copy(io.Discard, nc)
		if err != nil {
			t.Fatalf("forged attach %d: %v after %d bytes (want EOF: closed unpaired)", i, err, n)
		}
		if n != 0 {
			t.Fatalf("forged attach %d received %d bytes of the producer's data path", i, n)
		}
	}
}

// TestAttackSiblingRankCertificate is attack #5: with mutual TLS, a
// sibling rank on the producer's host, holding its own valid certificate
// (for the shared host and its own rank), claims the producer's id with a
// new incarnation. Hostname verification ignored the port and the claim
// was accepted at once, failing the consumer's in-flight load. Now the
// certificate must name the claimed rank: the claim is refused before any
// session exists, and the in-flight load completes with the producer's
// bytes.
func TestAttackSiblingRankCertificate(t *testing.T) {
	f := newTLSFleet(t)
	p, c := orderedPair(t, f.rank(t))
	sib := startTN(t, nodeOpt{mut: f.rank(t)})
	warm(t, c, p)

	// The load is in flight: submitted before the producer has the blocks.
	ks := nodetest.Keys("sibling", 2)
	if err := c.m.NewRequest("d5", nodetest.PDParams(t, "kv5", p.PeerID())); err != nil {
		t.Fatal(err)
	}
	if v := waitVerdict(t, c.m, "d5", ks[0]); v != Hit {
		t.Fatalf("lookup = %v, want HIT", v)
	}
	j, _ := c.m.SubmitLoad("d5", ks)

	sibCert := f.client(t, "127.0.0.1", RankURI(sib.PeerID()))
	before := c.Refused().Identity
	sp := startSpooferAs(t, c.PeerID(), p.PeerID(), p.cfg.Incarnation+1, sibCert)
	select {
	case <-sp.ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the sibling's claim was neither refused nor answered")
	}
	select {
	case <-sp.ready:
		t.Fatal("the sibling's claim was acknowledged")
	default:
	}
	if got := c.Refused().Identity - before; got < 1 {
		t.Fatalf("identity refusals rose by %d, want the sibling's claim refused", got)
	}
	waitLog(t, c, "names no such rank")

	storeBlocks(t, p, "kv5", ks)
	if r := waitResult(t, c.m, j, 5*time.Second); !r.OK {
		t.Fatalf("the in-flight load: %+v", r)
	}
	checkBlocks(t, c.m, ks)
	c.m.RequestFinished("d5")
	if replaced, _ := counters(t, c); replaced != 0 {
		t.Fatalf("%d sessions replaced", replaced)
	}
}

// TestAttackClaimFromAnotherHost is an attack that held before issue 25,
// kept in the suite: on plain TCP with trust_claimed_host off, a Hello
// claiming a peer id on another host than the connection's source is
// refused before any session exists, and counted (both halves: the Hello
// and the DataAttach).
func TestAttackClaimFromAnotherHost(t *testing.T) {
	c := startTN(t, nodeOpt{})
	sp := startSpoofer(t, c.PeerID(), "10.9.9.9:7777", nil)
	select {
	case <-sp.ended:
	case <-time.After(5 * time.Second):
		t.Fatal("a claim from another host was neither refused nor answered")
	}
	select {
	case <-sp.ready:
		t.Fatal("a claim from another host was acknowledged")
	default:
	}
	nodetest.WaitFor(t, func() bool { return c.Refused().Identity == 2 })
}
