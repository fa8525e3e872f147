package node

import (
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// conns returns how many control connections from src have a writer.
func (q *sendQueues) conns(src string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if sh := q.src[src]; sh != nil {
		sh.mu.Lock()
		defer sh.mu.Unlock()
		return len(sh.writers)
	}
	return 0
}

// TestAttackManyFacesQueues is the many faces attack (TestAttackManyFaces)
// on buffered bytes: one host opens 8 sessions under 8 ports of its own,
// and each sends lookups of 16,384 keys (a 262 KB answer each) and never
// reads the answers. Per connection the node queued up to maxQueued, so
// the host had it queue 8 times that. The control connections of a source
// now queue at most maxQueued together: the test samples what the node
// queues for the host every millisecond and checks that it stays within
// maxQueued, that the 8 sessions are closed, and that a ninth session of
// the same host, which reads its answers, keeps its session and its
// answers throughout. How many of its answers came during the attack is
// logged, not asserted (it depends on the machine's load): the lookup key
// rate the host's sessions share keeps the 8 from holding the node's loop.
func TestAttackManyFacesQueues(t *testing.T) {
	const attacker = "127.0.0.2"
	needAddr(t, attacker)
	p := startTN(t, nodeOpt{})
	good := startSpooferFrom(t, p.PeerID(), attacker+":41100", 0x600D, nil, attacker)
	<-good.ready
	// The faces' receive buffers are small and fixed (the kernel would
	// otherwise take up to tcp_rmem's maximum, 32 MiB here, for each
	// before anything queues in the node).
	smallWindow := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(attacker)}, Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		c.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return err
	}}
	const faces, lookups, keys = 8, 32, 16384
	sps := make([]*spoofer, faces)
	for i := range sps {
		sp := startSpooferDial(t, p.PeerID(), fmt.Sprintf("%s:%d", attacker, 41000+i), 0xBAD, nil, smallWindow)
		select {
		case <-sp.ready:
		case <-time.After(5 * time.Second):
			t.Fatalf("face %d got no session", i)
		}
		sp.deaf.Store(true)
		sps[i] = sp
	}
	if n := p.sendq.conns(attacker); n != faces+1 {
		t.Fatalf("%d control connections from %s, want %d", n, attacker, faces+1)
	}
	ks := make([]wire.Key, keys)
	for i := range sps {
		go func() {
			for r := range lookups {
				sps[i].send(sps[i].ctl, &wire.Lookup{ReqID: fmt.Sprintf("q%d-%d", i, r), Round: 1, Keys: ks})
				sps[i].send(sps[i].data, &wire.Probe{}) // a keepalive: only the queue may end it
			}
		}()
	}
	// The reading session looks up one key every 10 ms meanwhile.
	stop := make(chan struct{})
	lookedUp := make(chan int)
	go func() {
		n := 0
		defer func() { lookedUp <- n }()
		for ; ; n++ {
			good.send(good.ctl, &wire.Lookup{ReqID: fmt.Sprint("good", n), Round: 1, Keys: ks[:1]})
			good.send(good.data, &wire.Probe{})
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	peak := 0
	deadline := time.Now().Add(30 * time.Second)
	for p.sendq.conns(attacker) > 1 && time.Now().Before(deadline) {
		peak = max(peak, p.sendq.queued(attacker))
		<-time.After(time.Millisecond)
	}
	left := p.sendq.conns(attacker)
	close(stop)
	sent := <-lookedUp + 1
	// The reading session's answers keep coming after the attack.
	before := good.answers.Load()
	good.send(good.ctl, &wire.Lookup{ReqID: "good-after", Round: 1, Keys: ks[:1]})
	nodetest.WaitFor(t, func() bool { return good.answers.Load() > before })
	t.Logf("many faces, buffered bytes: peak %d bytes queued for %s (bound %d); %d of %d connections left; the reading session had %d answers to its %d lookups when the attack ended",
		peak, attacker, maxQueued, left, faces+1, before, sent)
	if peak > maxQueued {
		t.Fatalf("the node queued %d bytes for one host, over %d", peak, maxQueued)
	}
	if left != 1 {
		t.Fatalf("%d control connections of %s left, want the reading one", left, attacker)
	}
	select {
	case <-good.ended:
		t.Fatal("the reading session of the attacking host was closed")
	default:
	}
}
