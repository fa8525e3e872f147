package node

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest"
)

// Issue 34, attack 3: a gate under churn. Attackers reopen every
// connection the gate closes at once, rather than every 100 ms
// (TestAttackGateFlood). With 160 churning from five other addresses a
// consumer was first in after up to 1.32 s, and a legitimate peer
// completed 0, 1 and 6 of 10 handshakes in three runs.

// churn holds n silent connections to addr, dialed from the addresses
// ips in turn, each reopened the moment the node closes it; stop ends it
// and closes them all. It returns how many connections it opened.
func churn(t *testing.T, addr string, ips []string, n int) (stop func() int) {
	t.Helper()
	quit := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	opened := 0
	live := map[net.Conn]bool{}
	stopped := false
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ips[i%len(ips)])}, Timeout: time.Second}
			var b [1]byte
			for {
				select {
				case <-quit:
					return
				default:
				}
				nc, err := d.Dial("tcp", addr)
				if err != nil {
					select {
					case <-quit:
						return
					case <-time.After(time.Millisecond):
					}
					continue
				}
				mu.Lock()
				if stopped {
					mu.Unlock()
					nc.Close()
					return
				}
				opened++
				live[nc] = true
				mu.Unlock()
				nc.Read(b[:]) // until the node closes it (or stop does)
				nc.Close()
				mu.Lock()
				delete(live, nc)
				mu.Unlock()
			}
		}()
	}
	return func() int {
		close(quit)
		mu.Lock()
		stopped = true
		for nc := range live {
			nc.Close()
		}
		mu.Unlock()
		wg.Wait()
		return opened
	}
}

// TestAttackGateChurn: 160 connections from five addresses, reopened at
// once, three runs (a fresh producer each). A consumer on an address with
// no attackers, which has never completed a handshake with the producer,
// gets in (its first PD lookup is a HIT) within churnConsumerBound, and
// a legitimate peer from that address then completes at least 9 of 10
// handshakes, each within churnHandshakeWithin. The figures are logged; docs/security-resources.md has them.
func TestAttackGateChurn(t *testing.T) {
	ips := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6"}
	if ln, err := net.Listen("tcp", ips[0]+":0"); err != nil {
		t.Skipf("no loopback address %s here: %v", ips[0], err)
	} else {
		ln.Close()
	}
	for run := range 3 {
		// The producer logs at info, as a node does by default: at debug
		// each evicted connection is a log line, work a production node
		// does not do.
		p := startTN(t, nodeOpt{mut: func(c *Config) {
			c.Timers.HandshakeTimeout = 30 * time.Second
			c.Log = slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
		}})
		c := startTN(t, nodeOpt{})
		stop := churn(t, p.PeerID(), ips, 160)
		churnFrom := time.Now()
		nodetest.WaitFor(t, func() bool { return p.gate.len() >= 64 })
		before := p.Refused().Gate
		start := time.Now()
		k := nodetest.Key("churn", run)
		storeBlocks(t, p, fmt.Sprint("kv-churn-", run), []Key{k})
		var in time.Duration
		for i := 0; ; i++ {
			id := fmt.Sprintf("churn-%d-%d", run, i)
			if err := c.m.NewRequest(id, nodetest.PDParams(t, id, p.PeerID())); err != nil {
				t.Fatal(err)
			}
			v := waitVerdict(t, c.m, id, k)
			c.m.RequestFinished(id)
			if v == Hit {
				in = time.Since(start)
				break
			}
			if time.Since(start) > 10*time.Second {
				stop()
				t.Fatalf("run %d: the consumer was not in after 10 s of churn", run)
			}
		}
		ok, slowest := handshakesWithin(t, p, 10, 32000+run*100, churnHandshakeWithin)
		opened := stop()
		took := time.Since(churnFrom)
		t.Logf("attack 3 (churn), run %d: consumer in after %v; %d of 10 handshakes, slowest %v; %d attacker connections opened in %v (%.0f/s), %d refused or evicted",
			run, in.Round(time.Millisecond), ok, slowest.Round(time.Millisecond), opened, took.Round(time.Millisecond),
			float64(opened)/took.Seconds(), p.Refused().Gate-before)
		if in > churnConsumerBound {
			t.Errorf("run %d: the consumer got in after %v, over %v", run, in, churnConsumerBound)
		}
		if ok < 9 {
			t.Errorf("run %d: %d of 10 handshakes completed, want at least 9", run, ok)
		}
	}
}

// The CI bounds under churn, margins over what was measured (figures in
// docs/security-resources.md): run alone, the consumer was in after
// 32-112 ms and the slowest handshake took 159 ms; beside other
// packages' tests under the race detector on a busy 2-core machine the
// accept loop fell to 300-900 accepts a second, a connection waits behind
// up to 160 reconnects, and the consumer took up to 1.63 s, a handshake
// up to 987 ms. The 1 s holds alone, not under that load.
const (
	churnConsumerBound   = 3 * time.Second
	churnHandshakeWithin = 3 * time.Second
)
