package sim

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/scenario"
)

// TestStarvedPostponesWatchdog: the table passes a starvation report to its
// sessions (loads.Table.Starved), so the progress watchdog of a load whose
// data path went silent fires that much later; it still fires.
func TestStarvedPostponesWatchdog(t *testing.T) {
	const starved = 800 * time.Millisecond
	tm := loads.KVP2PTimers()
	f := newPair(t, "domain", &tm)
	j := f.load("kv", keysOf("a", 2)) // decoder first: it parks, with Progress frames
	f.n.Advance(500 * time.Millisecond)
	f.p.DataBlackhole = true
	f.n.Advance(100 * time.Millisecond)
	f.c.T.Starved(starved)
	f.n.Advance(tm.StallTimeout + 100*time.Millisecond) // the unpostponed deadline has passed
	if d, ok := f.result(f.c, j); ok {
		t.Fatalf("the watchdog ignored the starvation report: %+v", d.r)
	}
	f.n.Advance(starved)
	d, ok := f.result(f.c, j)
	if !ok || d.r.OK || !strings.Contains(d.r.Reason, "progress-stall") {
		t.Fatalf("silent load after the postponed deadline: %+v (ended %v)", d.r, ok)
	}
}

// TestFrozenNodeBlamesNobody (issue 24 item 4): a node whose process is
// frozen for seconds (SIGSTOP; the simulator's stall) judges none of its
// peers for its own lateness: on waking it handles what reached it
// meanwhile before its first tick, so none of its own timers (heartbeat,
// progress watchdog, probes) ends a session. Its peer, which saw a real
// silence, may end it (heartbeat timeout, stall): that is the peer's
// judgment, not the frozen node's.
func TestFrozenNodeBlamesNobody(t *testing.T) {
	for _, frozen := range []string{"consumer", "producer"} {
		t.Run(frozen, func(t *testing.T) {
			tm := loads.KVP2PTimers()
			f := newPair(t, "domain", &tm)
			ks := keysOf("a", 2)
			f.store("kv", ks)
			nd := f.c
			if frozen == "producer" {
				nd = f.p
			}
			// The load takes about a second on the wire: it is in flight
			// when the freeze comes.
			f.p.SlowBps = int64(2 * f.p.Store.BlockBytes())
			f.load("kv", ks)
			f.n.Stall(nd.ID)
			f.n.Advance(5 * time.Second) // beyond the heartbeat, stall and probe timeouts
			if _, err := f.n.Heal(nd.ID); err != nil {
				t.Fatal(err)
			}
			f.n.Advance(2 * time.Second)
			for _, cause := range []string{"heartbeat-timeout", "progress-stall", "handshake-failed"} {
				if f.logHas(nodetest.PeerDown(nd.ID, peerOfTest(f, nd), cause)) {
					t.Fatalf("the frozen %s ended its session for its own lateness (%s):\n%s", frozen, cause, f.log)
				}
			}
		})
	}
}

func peerOfTest(f *pair, nd *Node) string {
	if nd == f.c {
		return f.p.ID
	}
	return f.c.ID
}

// TestFrozenScenarioBlamesNobody: in the built-in scenario frozen (a
// consumer, then a producer, stalled for 3 s, beyond the heartbeat, stall
// and probe timeouts), neither frozen node ends a session by a timer of
// its own from its stall until the next fault after its heal: it reads
// its peers' ends (resets, goodbyes) on waking, and times out none of
// them for its own lateness. TestScenarioTargets holds its report.
func TestFrozenScenarioBlamesNobody(t *testing.T) {
	sc := load(t, "frozen")
	var b bytes.Buffer
	lg := slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if _, err := Run(sc, health.Domain, Options{Log: lg}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	frozen := 0
	for _, f := range sc.Faults {
		if f.Kind != scenario.Stall {
			continue
		}
		for _, id := range sc.Ranks(f.Target) {
			frozen++
			name, r, _ := scenario.SplitRankID(id)
			pod, _ := sc.Pod(name)
			node := fmt.Sprintf("node=%s:%d ", pod.Host, pod.BasePort+r)
			// The window: from its stall's log line to the first fault
			// line after its heal's (or the end).
			in, healed := false, false
			n := 0
			for _, l := range lines {
				switch {
				case strings.Contains(l, "msg=fault kind=stall rank="+id+" "):
					in = true
					continue
				case in && strings.Contains(l, "msg=fault kind=heal rank="+id+" "):
					healed = true
					continue
				case healed && strings.Contains(l, "msg=fault "):
					in = false
				}
				if !in || !strings.Contains(l, node) {
					continue
				}
				n++
				for _, own := range []string{"cause=heartbeat-timeout", "cause=progress-stall", "handshake timed out", "data path stalled"} {
					if strings.Contains(l, own) {
						t.Errorf("frozen %s timed out a peer for its own lateness: %s", id, l)
					}
				}
			}
			if !healed || n == 0 {
				t.Errorf("%s: healed %v, %d log lines of its node in its window: the window was not found", id, healed, n)
			}
		}
	}
	if frozen != 2 {
		t.Fatalf("%d frozen ranks in frozen, want a consumer and a producer", frozen)
	}
}
