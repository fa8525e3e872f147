package node

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// Hostile-peer tests: an attacker on loopback speaks the wire protocol by
// hand. security_bounds_test.go holds the resource bounds.

// forged is what the attacker's blocks hold: right size, right CRC.
func forged() []byte { return bytes.Repeat([]byte{0xEE}, nodetest.BlockBytes) }

// spoofer pretends to be peer claim towards target: it opens a control and
// a data connection (over TLS if tc is set), answers the handshake and
// serves every Fetch with forged blocks.
type spoofer struct {
	ctl, data net.Conn
	ready     chan struct{} // the target acknowledged our Hello
	ended     chan struct{} // the control connection ended
	fetches   atomic.Int32  // fetches served with forged blocks
	answers   atomic.Int32  // lookup answers received
	hits      atomic.Int64  // keys those answers said HIT
	mu        sync.Mutex    // one writer at a time
}

// send writes m on the control connection (or data, for data frames).
func (s *spoofer) send(nc net.Conn, m wire.Message) {
	b, err := wire.Append(nil, m)
	if err != nil {
		panic(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	nc.Write(b) // a refused connection shows on the reader's side
}

func startSpoofer(t *testing.T, target, claim string, tc *tls.Config) *spoofer {
	t.Helper()
	return startSpooferAs(t, target, claim, 0xBAD, tc)
}

// startSpooferAs is startSpoofer claiming incarnation inc.
func startSpooferAs(t *testing.T, target, claim string, inc uint64, tc *tls.Config) *spoofer {
	t.Helper()
	return startSpooferFrom(t, target, claim, inc, tc, "")
}

// startSpooferFrom is startSpooferAs dialing from the local address
// local (empty: any), so that a claim of another loopback host passes
// the source check.
func startSpooferFrom(t *testing.T, target, claim string, inc uint64, tc *tls.Config, local string) *spoofer {
	t.Helper()
	var d net.Dialer
	if local != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
	}
	dial := func() net.Conn {
		nc, err := d.Dial("tcp", target)
		if err != nil {
			t.Fatal(err)
		}
		if tc != nil {
			nc = tls.Client(nc, tc)
		}
		t.Cleanup(func() { nc.Close() })
		return nc
	}
	s := &spoofer{ready: make(chan struct{}), ended: make(chan struct{})}
	s.ctl, s.data = dial(), dial()
	send := s.send
	go func() {
		defer close(s.ended)
		h, a := halves(claim, inc, 0)
		send(s.ctl, h)
		send(s.data, a)
		rd := wire.NewReader(s.ctl, wire.DefaultLimits())
		for {
			m, err := rd.Next()
			if err != nil {
				return
			}
			switch m := m.(type) {
			case *wire.Hello:
				send(s.ctl, &wire.HelloAck{PeerID: claim, Incarnation: inc})
			case *wire.HelloAck:
				close(s.ready)
			case *wire.Ping:
				send(s.ctl, &wire.Pong{Seq: m.Seq})
			case *wire.LookupResp:
				s.answers.Add(1)
				for _, h := range m.Hits {
					if h {
						s.hits.Add(1)
					}
				}
			case *wire.Fetch:
				if len(m.Keys) == 0 {
					continue
				}
				var out []byte
				for i := range m.Keys {
					p := forged()
					out = wire.AppendChunkHeader(out, &wire.Chunk{Job: m.Job, Block: uint32(i), Len: uint32(len(p)), CRC: wire.CRC32C(p)})
					out = append(out, p...)
				}
				n := uint64(len(m.Keys) * nodetest.BlockBytes)
				out, _ = wire.Append(out, &wire.Done{Job: m.Job, Bytes: n})
				s.mu.Lock()
				s.data.Write(out)
				s.mu.Unlock()
				send(s.ctl, &wire.TransferDone{ReqID: m.ReqID, Round: m.Round, Job: m.Job, Success: true, Bytes: n})
				s.fetches.Add(1)
			}
		}
	}()
	return s
}

// tlsFleet is a test CA and the TLS config of nodes on 127.0.0.1.
type tlsFleet struct{ *nodetest.TLSFleet }

func newTLSFleet(t testing.TB) *tlsFleet { return &tlsFleet{nodetest.NewTLSFleet(t)} }

// node returns a TLS config for a node whose certificate names names.
func (f *tlsFleet) node(t testing.TB, names ...string) TLSConfig {
	fs := f.Files(t, names...)
	return TLSConfig{CertFile: fs.Cert, KeyFile: fs.Key, CAFile: fs.CA}
}

// rank is a Config mutator that gives the node a certificate for its own
// rank: its host and RankURI(its peer id).
func (f *tlsFleet) rank(t testing.TB) func(*Config) {
	return func(c *Config) { c.TLS = f.node(t, "127.0.0.1", RankURI(c.PeerID)) }
}

// client returns a client TLS config with a certificate for names (none:
// no client certificate) that trusts the fleet's CA.
func (f *tlsFleet) client(t *testing.T, names ...string) *tls.Config {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(f.CA.PEM)
	c := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13}
	if len(names) > 0 {
		l, err := f.CA.Issue(names...)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := tls.X509KeyPair(l.CertPEM, l.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c
}

// TestSpoofedHelloForgesBlocks is finding 1: a Hello naming the consumer's
// producer, with a new incarnation, replaced the producer's session, and a
// PD load then reported OK with the attacker's bytes. On plain TCP from
// the producer's own host the source address proves nothing, so the
// consumer probes the live session before replacing it: the producer
// answers and the spoofer is sent away. With mutual TLS the attack fails
// whatever certificate the attacker holds. Either way the real producer's
// bytes load.
func TestSpoofedHelloForgesBlocks(t *testing.T) {
	f := newTLSFleet(t)
	for _, tt := range []struct {
		name     string
		tls      bool
		attacker func(t *testing.T) *tls.Config
		forged   bool
	}{
		{"plain TCP", false, func(*testing.T) *tls.Config { return nil }, false},
		{"TLS, no client certificate", true, func(t *testing.T) *tls.Config { return f.client(t) }, false},
		{"TLS, certificate for another host", true, func(t *testing.T) *tls.Config { return f.client(t, "mallory.test", "10.9.9.9") }, false},
		{"TLS, certificate from another CA", true, func(t *testing.T) *tls.Config {
			return newTLSFleet(t).client(t, "127.0.0.1")
		}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mut := func(c *Config) {}
			if tt.tls {
				mut = f.rank(t)
			}
			p := startTN(t, nodeOpt{mut: mut})
			c := startTN(t, nodeOpt{mut: mut})
			warm(t, c, p)

			sp := startSpoofer(t, c.PeerID(), p.PeerID(), tt.attacker(t))
			select {
			case <-sp.ready:
			case <-sp.ended:
			case <-time.After(5 * time.Second):
				t.Fatal("the spoofer got neither an answer nor a refusal")
			}

			ks := nodetest.Keys("forge", 2)
			storeBlocks(t, p, "kv1", ks)
			pdLoad(t, c, p, "d1", "kv1", ks)
			got, ok := c.m.ReadBlock(ks[0])
			if !ok {
				t.Fatal("loaded block missing")
			}
			isForged := bytes.Equal(got, forged())
			if isForged != tt.forged {
				t.Fatalf("forged block loaded: %v, want %v (spoofer served %d fetches)", isForged, tt.forged, sp.fetches.Load())
			}
			if !tt.forged {
				if !tt.tls {
					// Held while the live session was probed, then refused.
					select {
					case <-sp.ended:
					case <-time.After(5 * time.Second):
						t.Fatal("the spoofer was not sent away")
					}
					select {
					case <-sp.ready:
						t.Fatal("the held spoofer was answered with a HelloAck")
					default:
					}
				} else if r := c.Refused(); r.TLS+r.Identity == 0 {
					t.Fatalf("the spoof was not counted as refused: %+v", r)
				}
				checkBlocks(t, c.m, ks)
				if n := sp.fetches.Load(); n != 0 {
					t.Fatalf("the spoofer was sent %d fetches", n)
				}
			}
			c.m.RequestFinished("d1")
		})
	}
}

// TestPinStormSparesTheEngine is finding 5: a peer's lookups naming every
// key, each for a new round, pinned the whole store and the engine's own
// writes failed. Peers may pin at most half the store; the engine's
// writes succeed during the storm.
func TestPinStormSparesTheEngine(t *testing.T) {
	p := startTN(t, nodeOpt{mut: func(c *Config) { c.Slots = 16 }})
	ks := nodetest.Keys("storm", 16)
	for _, k := range ks {
		if err := p.m.PutBlock(k, nodetest.Bytes(k)); err != nil {
			t.Fatal(err)
		}
	}
	sp := startSpoofer(t, p.PeerID(), "127.0.0.1:1", nil)
	select {
	case <-sp.ready:
	case <-time.After(5 * time.Second):
		t.Fatal("no session")
	}
	const rounds = 8
	for i := range rounds {
		sp.send(sp.ctl, &wire.Lookup{ReqID: fmt.Sprintf("storm-%d", i), Round: 1, Keys: ks})
	}
	nodetest.WaitFor(t, func() bool { return sp.answers.Load() == rounds })
	st, err := p.m.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Pinned > 8 {
		t.Fatalf("peers pinned %d of 16 slots, want at most half", st.Pinned)
	}
	for i, k := range nodetest.Keys("engine", 8) {
		if err := p.m.PutBlock(k, nodetest.Bytes(k)); err != nil {
			t.Fatalf("the engine's write %d failed during a pin storm: %v", i, err)
		}
	}
}
