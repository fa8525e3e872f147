package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/session"
)

// TestTransferTime: a load costs a round trip plus its bytes over the
// producer's bandwidth; slow scales the transfer, delay the latency.
func TestTransferTime(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(p *Node)
		bw   int64
		want time.Duration // from SubmitLoad to the result
	}{
		{"unlimited", func(*Node) {}, 0, 2 * lat},
		{"10MB/s", func(*Node) {}, 10e6, 2*lat + 4*time.Millisecond}, // 4 blocks of 10 kB
		{"slow 1MB/s", func(p *Node) { p.SlowBps = 1e6 }, 10e6, 2*lat + 40*time.Millisecond},
		{"delay 5ms", func(p *Node) { p.ExtraDelay = 5 * time.Millisecond }, 0, 2 * (lat + 5*time.Millisecond)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newPair(t, health.PerPeer, nil)
			f.n.Bandwidth, f.n.WireBlockBytes = tc.bw, 10_000
			ks := keysOf("a", 4)
			f.connOf(f.c) // the session is up before the fault
			f.store("kv", ks)
			tc.set(f.p)
			j := f.load("kv", ks)
			at := f.n.Now
			f.n.Advance(time.Second)
			d := f.mustResult(f.c, j)
			if !d.r.OK || d.at.Sub(at) != tc.want {
				t.Fatalf("load %+v after %v, want OK after %v", d.r, d.at.Sub(at), tc.want)
			}
		})
	}
}

// TestCrash: the crashed node's peers see a reset within a one-way latency
// and fail its loads; dials to it are refused; healed, it is a fresh node
// with a new incarnation.
func TestCrash(t *testing.T) {
	f := newPair(t, health.PerPeer, nil)
	j := f.load("kv", keysOf("a", 2)) // decoder first: parked on the producer
	f.n.Crash(prodID)
	f.n.Advance(lat)
	d := f.mustResult(f.c, j)
	if d.r.OK || !strings.Contains(d.r.Reason, "conn-reset") {
		t.Fatalf("load to a crashed node: %+v", d.r)
	}
	at := len(f.n.Dials)
	if v := f.request("kv2", nodetest.PDParams(t, "kv2", prodID), 10*time.Millisecond); v != session.Miss {
		t.Fatalf("lookup while crashed = %v, want MISS", v)
	}
	if len(f.n.Dials) != at+1 || !f.logHas(nodetest.PeerDown(consID, prodID, "handshake-failed")) {
		t.Fatalf("dial to a crashed node not refused:\n%s", f.log)
	}
	np, err := f.n.Heal(prodID)
	if err != nil {
		t.Fatal(err)
	}
	if np == f.p || np.Opts().Incarnation != 2 {
		t.Fatalf("healed crash: same node or incarnation %d", np.Opts().Incarnation)
	}
	ks := keysOf("b", 2)
	f.store("kv3", ks)
	j = f.load("kv3", ks)
	f.n.Advance(time.Millisecond)
	if d := f.mustResult(f.c, j); !d.r.OK {
		t.Fatalf("load from the new incarnation: %+v", d.r)
	}
	f.settled(f.c)
	f.settled(np)
}

// TestCloseControl: both sides see the reset once; the process lives on
// and accepts a new session.
func TestCloseControl(t *testing.T) {
	f := newPair(t, health.PerPeer, nil)
	j := f.load("kv", keysOf("a", 2))
	f.n.CloseControl(prodID)
	f.n.Advance(lat)
	if d := f.mustResult(f.c, j); d.r.OK || !strings.Contains(d.r.Reason, "conn-reset") {
		t.Fatalf("load: %+v", d.r)
	}
	if !f.logHas(nodetest.PeerDown(prodID, consID, "conn-reset")) || !f.logHas(nodetest.PeerDown(consID, prodID, "conn-reset")) {
		t.Fatalf("both sides must see the reset:\n%s", f.log)
	}
	ks := keysOf("b", 2)
	f.store("kv2", ks)
	if v := f.request("kv2", nodetest.PDParams(t, "kv2", prodID), 0); v != session.Miss {
		t.Fatalf("lookup while the new handshake is pending = %v, want MISS (#64501)", v)
	}
	f.c.T.RequestFinished(f.n.Now, "kv2")
	f.store("kv3", ks)
	j = f.load("kv3", ks)
	f.n.Advance(time.Millisecond)
	if d := f.mustResult(f.c, j); !d.r.OK {
		t.Fatalf("load after the reset: %+v", d.r)
	}
}

// TestBlackhole: nothing gets through and nothing resets: a load fails only
// at the heartbeat timeout; a dial hangs, and its SYN retransmission
// connects once the blackhole heals.
func TestBlackhole(t *testing.T) {
	f := newPair(t, health.PerPeer, nil)
	j := f.load("kv", keysOf("a", 2))
	f.p.Silent = true
	f.n.Advance(f.tm.HeartbeatTimeout - 20*time.Millisecond)
	f.noResult(f.c, j)
	f.n.Advance(20 * time.Millisecond)
	if d := f.mustResult(f.c, j); d.r.OK || !strings.Contains(d.r.Reason, "heartbeat-timeout") {
		t.Fatalf("load: %+v", d.r)
	}
	if v := f.request("kv2", nodetest.PDParams(t, "kv2", prodID), 0); v != session.Miss {
		t.Fatalf("lookup while the dial hangs = %v, want MISS", v)
	}
	f.n.Advance(2 * time.Second)
	if f.logHas(nodetest.PeerDown(consID, prodID, "handshake-failed")) {
		t.Fatal("a dial into a blackhole must hang, not fail")
	}
	f.p.Silent = false
	f.n.Advance(time.Second) // the SYN is retransmitted 3 s after the dial
	ks := keysOf("b", 2)
	f.store("kv3", ks)
	j = f.load("kv3", ks)
	f.n.Advance(time.Millisecond)
	if d := f.mustResult(f.c, j); !d.r.OK {
		t.Fatalf("load after the heal: %+v", d.r)
	}
}

// TestBlackholeData: data ops vanish both ways (no bytes, no Progress, no
// probe answers) while control messages flow: the session outlives the
// heartbeat timeout and the load waits for its load timeout.
func TestBlackholeData(t *testing.T) {
	f := newPair(t, health.PerPeer, nil)
	ks := keysOf("a", 2)
	f.store("kv", ks)
	conn := f.connOf(f.c)
	f.probe(conn, 1)
	f.n.Advance(time.Millisecond)
	if f.n.probeAcks != 1 {
		t.Fatalf("probe over a healthy data path: %d answers", f.n.probeAcks)
	}
	f.p.DataBlackhole = true
	j := f.load("kv", ks)
	f.probe(conn, 2)
	f.n.Advance(f.tm.HeartbeatTimeout + time.Second)
	f.noResult(f.c, j)
	if f.n.probeAcks != 1 {
		t.Fatal("a probe was answered through a data blackhole")
	}
	if f.logHas("peer down") {
		t.Fatalf("control connection died:\n%s", f.log)
	}
	f.n.Advance(f.tm.LoadTimeoutPD - f.tm.HeartbeatTimeout - time.Second + f.n.Tick)
	if d := f.mustResult(f.c, j); d.r.OK || d.r.Reason != "load timed out" {
		t.Fatalf("load: %+v", d.r)
	}
}

// TestProgressFrames: a parked PD load gets Progress frames, so the
// stall watchdog leaves it alone; when they stop (blackhole-data, or a
// stalled producer) the watchdog fails it after StallTimeout.
func TestProgressFrames(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(f *pair)
		stall bool
	}{
		{"healthy", func(*pair) {}, false},
		{"blackhole-data", func(f *pair) { f.p.DataBlackhole = true }, true},
		{"stall", func(f *pair) { f.n.Stall(prodID) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tm := loads.KVP2PTimers()
			f := newPair(t, "domain", &tm)
			j := f.load("kv", keysOf("a", 2)) // decoder first: nothing to send yet
			f.n.Advance(500 * time.Millisecond)
			tc.fault(f)
			f.n.Advance(tm.StallTimeout + 100*time.Millisecond)
			d, ok := f.result(f.c, j)
			if !tc.stall {
				if ok {
					t.Fatalf("a parked load with Progress frames failed: %+v", d.r)
				}
				return
			}
			if !ok || d.r.OK || !strings.Contains(d.r.Reason, "progress-stall") {
				t.Fatalf("silent load: %+v (ended %v)", d.r, ok)
			}
		})
	}
}

// TestStall: a stalled process handles nothing and runs no timers; what
// reaches it is delivered in order when it resumes.
func TestStall(t *testing.T) {
	f := newPair(t, health.PerPeer, nil)
	ks := keysOf("a", 3)
	f.store("warm", nil)
	if v := f.request("s", nodetest.SymParams(t, "s", prodID), 10*time.Millisecond); v != session.Retry {
		t.Fatalf("first symmetric lookup = %v, want RETRY", v)
	}
	for _, k := range ks {
		f.c.T.Lookup(f.n.Now, "s", k)
	}
	buf := make([]byte, f.p.Store.BlockBytes())
	for _, k := range ks {
		f.p.Store.Put(k, content(buf, k))
	}
	f.n.Stall(prodID)
	ticked := f.p.lastTick
	f.c.T.EndStep(f.n.Now)
	f.n.Flush(f.c)
	f.n.Advance(5 * time.Second)
	if v := f.c.T.Lookup(f.n.Now, "s", ks[0]); v != session.Retry {
		t.Fatalf("lookup answered by a stalled process: %v", v)
	}
	if f.p.lastTick != ticked {
		t.Fatal("a stalled process ticked")
	}
	if _, err := f.n.Heal(prodID); err != nil {
		t.Fatal(err)
	}
	f.n.Advance(time.Millisecond)
	for _, k := range ks {
		if v := f.c.T.Lookup(f.n.Now, "s", k); v != session.Hit {
			t.Fatalf("lookup after the stall = %v, want HIT", v)
		}
	}
	if f.logHas("peer down") {
		t.Fatalf("a 5 s stall ended a session (heartbeat timeout 10 s):\n%s", f.log)
	}
}

// TestGoodbyeIdle: the sessions end in order with cause goodbye on both
// sides (never a fault); the next request opens a new one.
func TestGoodbyeIdle(t *testing.T) {
	f := newPair(t, health.PerPeer, nil)
	f.load("kv", keysOf("a", 1))
	f.c.T.RequestFinished(f.n.Now, "kv")
	f.n.Flush(f.c)
	f.n.GoodbyeIdle(prodID)
	f.n.Advance(time.Millisecond)
	if !f.logHas(nodetest.PeerDown(consID, prodID, "goodbye")) || !f.logHas(nodetest.PeerDown(prodID, consID, "goodbye")) {
		t.Fatalf("no orderly end on both sides:\n%s", f.log)
	}
	if f.logHas("conn-reset") {
		t.Fatalf("an idle eviction looked like a fault:\n%s", f.log)
	}
	ks := keysOf("b", 1)
	f.store("kv2", ks)
	j := f.load("kv2", ks)
	f.n.Advance(time.Millisecond)
	if d := f.mustResult(f.c, j); !d.r.OK {
		t.Fatalf("load on the reopened session: %+v", d.r)
	}
}

// TestRefuseHandshake: new handshakes with a refusing node end as
// incompatible (not a fault); healed, it handshakes again.
func TestRefuseHandshake(t *testing.T) {
	f := newPair(t, health.PerPeer, nil)
	f.p.RefuseHandshake = true
	if v := f.request("kv", nodetest.PDParams(t, "kv", prodID), 10*time.Millisecond); v != session.Miss {
		t.Fatalf("lookup = %v, want MISS", v)
	}
	if !f.logHas(nodetest.PeerDown(consID, prodID, "incompatible")) {
		t.Fatalf("no incompatible end:\n%s", f.log)
	}
	if _, err := f.n.Heal(prodID); err != nil {
		t.Fatal(err)
	}
	ks := keysOf("b", 1)
	f.store("kv2", ks)
	j := f.load("kv2", ks)
	f.n.Advance(time.Millisecond)
	if d := f.mustResult(f.c, j); !d.r.OK {
		t.Fatalf("load after the heal: %+v", d.r)
	}
}

// TestRestart: the old incarnation's connections reset at once and a new
// incarnation answers under the same id.
func TestRestart(t *testing.T) {
	f := newPair(t, health.PerPeer, nil)
	j := f.load("kv", keysOf("a", 2))
	np, err := f.n.Restart(prodID)
	if err != nil {
		t.Fatal(err)
	}
	f.n.Advance(lat)
	if d := f.mustResult(f.c, j); d.r.OK || !strings.Contains(d.r.Reason, "conn-reset") {
		t.Fatalf("load owed by the old incarnation: %+v", d.r)
	}
	if np.Opts().Incarnation != 2 || f.n.Node(prodID) != np {
		t.Fatal("no new incarnation")
	}
	ks := keysOf("b", 2)
	f.store("kv2", ks)
	j = f.load("kv2", ks)
	f.n.Advance(time.Millisecond)
	if d := f.mustResult(f.c, j); !d.r.OK {
		t.Fatalf("load from the new incarnation: %+v", d.r)
	}
}

// connOf returns the connection id of nd's only open session.
func (f *pair) connOf(nd *Node) loads.ConnID {
	f.t.Helper()
	f.request("warm", nodetest.PDParams(f.t, "warm", prodID), 10*time.Millisecond)
	f.c.T.RequestFinished(f.n.Now, "warm")
	for _, e := range nd.ends.sorted() {
		if e.open {
			return e.conn
		}
	}
	f.t.Fatal("no open connection")
	return 0
}

// probe performs a data-path probe as the domain policy's session would.
func (f *pair) probe(conn loads.ConnID, seq uint64) {
	f.n.data(f.c, conn, &session.DataOp{Kind: session.OpProbe, Seq: seq})
}

// TestBlackholeDataHeld (issue 24): what a data blackhole refused is held
// by the sender's kernel, not lost: the load's bytes arrive at the first
// retransmission after the heal (0.2 s × (2^k − 1) after the first refusal:
// 0.2, 0.6, 1.4 s), and the load succeeds; nothing arrives before it.
func TestBlackholeDataHeld(t *testing.T) {
	f := newPair(t, health.PerPeer, nil)
	ks := keysOf("a", 2)
	f.store("kv", ks)
	f.p.DataBlackhole = true
	start := f.n.Now
	j := f.load("kv", ks)
	f.n.Advance(time.Second - f.n.Now.Sub(start))
	f.noResult(f.c, j)
	f.p.DataBlackhole = false // healed at 1 s: the next retransmission is at 1.4 s
	f.n.Advance(390 * time.Millisecond)
	f.noResult(f.c, j)
	f.n.Advance(60 * time.Millisecond) // the first refusal came a step after the load began
	if d := f.mustResult(f.c, j); !d.r.OK {
		t.Fatalf("held load after the heal: %+v", d.r)
	}
}

// TestBlackholeDataUserTimeout: a blackhole that outlasts UserTimeout
// (TCP_USER_TIMEOUT) aborts the connection of the side holding frames at
// the retransmission after it, and only that side hears of it (its RST is
// lost in the drop).
func TestBlackholeDataUserTimeout(t *testing.T) {
	f := newPair(t, health.PerPeer, nil)
	f.n.UserTimeout = 2 * time.Second
	ks := keysOf("a", 2)
	f.store("kv", ks)
	f.p.DataBlackhole = true
	j := f.load("kv", ks)
	// Retransmissions at 0.2, 0.6, 1.4, 3.0 s: the one at 3.0 s is past
	// the user timeout and aborts the producer's side.
	f.n.Advance(2900 * time.Millisecond)
	if f.logHas(nodetest.PeerDown(prodID, consID, "conn-reset")) {
		t.Fatal("aborted before the retransmission past the user timeout")
	}
	f.n.Advance(200 * time.Millisecond)
	if !f.logHas(nodetest.PeerDown(prodID, consID, "conn-reset")) {
		t.Fatalf("the producer's side was not aborted at the retransmission past the user timeout:\n%s", f.log)
	}
	f.noResult(f.c, j) // the consumer's side heard nothing: its RST was dropped
}
