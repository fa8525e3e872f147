package sim

import (
	"reflect"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/scenario"
)

// TestBuiltinsOutlastTimeouts: every built-in scenario runs on, after the
// last entry of its timeline, for the longest a load can take to resolve
// under any timer set (load timeout plus abort-ack), so that a request is
// never stuck only because the run stopped.
func TestBuiltinsOutlastTimeouts(t *testing.T) {
	var longest time.Duration
	for _, tm := range []loads.Timers{loads.VLLMTimers(), loads.KVP2PTimers()} {
		longest = max(longest, max(tm.LoadTimeoutPD, tm.LoadTimeoutSymmetric)+tm.AbortAckTimeout)
	}
	for _, name := range scenario.Builtins() {
		sc := load(t, name)
		last := time.Duration(0)
		for _, f := range sc.Faults {
			last = max(last, f.At)
		}
		if sc.Duration < last+longest {
			t.Errorf("%s lasts %v; its last fault is at %v, and a load may take %v to resolve", name, sc.Duration, last, longest)
		}
	}
}

// TestDeterministicVariants: the ablation's variants are as deterministic
// as the presets, and each changes the run.
func TestDeterministicVariants(t *testing.T) {
	sc := load(t, "pod-partial")
	base := run(t, sc, health.Domain, 0)
	for _, o := range []Options{{TimerSet: TimersVLLM}, {DropDomains: true}} {
		a, err := Run(sc, health.Domain, o)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Run(sc, health.Domain, o)
		if !reflect.DeepEqual(a.Requests, b.Requests) || a.Events != b.Events || a.Report != b.Report {
			t.Fatalf("%+v: two runs differ", o)
		}
		if reflect.DeepEqual(a.Requests, base.Requests) {
			t.Fatalf("%+v: same run as the preset", o)
		}
	}
	if _, err := Run(sc, health.Domain, Options{TimerSet: "fast"}); err == nil {
		t.Fatal("unknown timer set accepted")
	}
}

// TestOrphansWhileRunning: a slot reserved for no job (a release dropped)
// is counted while the run goes on, not only after the drain.
func TestOrphansWhileRunning(t *testing.T) {
	sc := load(t, "rank-crash")
	clean := cached(t, "rank-crash", health.PerPeer)
	if clean.Orphans != 0 || clean.Peak == 0 || clean.Report.OrphanSlots != 0 || clean.Report.PeakSlots != clean.Peak {
		t.Fatalf("clean run: orphans %d, peak %d, report %+v", clean.Orphans, clean.Peak, clean.Report)
	}
	res, err := Run(sc, health.PerPeer, Options{leakAt: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.Orphans != 1 || res.Report.OrphanSlots != 1 {
		t.Fatalf("a dropped release: orphans %d (report %d), want 1", res.Orphans, res.Report.OrphanSlots)
	}
}

// TestVLLMDialNotRefused: under the vllm timer set a dial to a crashed
// rank is not refused: it waits, retried silently, until the handshake
// deadline (or a listener); under kvp2p's it is refused within a round
// trip.
func TestVLLMDialNotRefused(t *testing.T) {
	for _, vllm := range []bool{false, true} {
		n := NewNet(t0)
		n.Latency = time.Millisecond
		n.VLLMTransport = vllm
		a, err := n.NewNode("a:1", NodeOpts{Policy: health.PerPeer})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.NewNode("b:1", NodeOpts{Policy: health.PerPeer}); err != nil {
			t.Fatal(err)
		}
		n.Crash("b:1")
		if err := a.T.NewRequest(n.Now, "r", loads.TransferParams{RemotePrefiller: &loads.Remote{KVRequestID: "r", RemoteHost: "b", RemotePort: 1}}); err != nil {
			t.Fatal(err)
		}
		n.Advance(time.Second)
		pending := false
		for _, e := range a.ends.sorted() {
			pending = pending || (e.open && e.pending)
		}
		if pending != vllm {
			t.Fatalf("vllm transport %v: dial still pending after 1 s = %v", vllm, pending)
		}
		if vllm {
			if _, err := n.Heal("b:1"); err != nil {
				t.Fatal(err)
			}
			n.Advance(time.Second)
			for _, e := range a.ends.sorted() {
				if e.pending {
					t.Fatal("the retried dial did not reach the healed rank")
				}
			}
		}
	}
}

// TestSlowSiblingProbesQueue: in slow-sibling the domain policy's probes of
// the slow ranks meet a backlog (their answers wait behind queued bytes),
// and still no healthy rank is closed for it.
func TestSlowSiblingProbesQueue(t *testing.T) {
	res := cached(t, "slow-sibling", health.Domain)
	if res.QueuedAcks == 0 {
		t.Fatal("no probe answer waited behind queued bytes: the scenario does not test what it says")
	}
	if r := res.Report; r.FalseFallbacks != 0 {
		t.Fatalf("slow ranks closed: %+v", r)
	}
}

// TestFrameBehindQueuedBytes: a small frame leaves at once from an idle
// connection, behind the bytes queued on its own connection otherwise (but
// never behind more than a send buffer's worth of them, ahead of the rest),
// and not behind another connection's.
func TestFrameBehindQueuedBytes(t *testing.T) {
	n := NewNet(t0)
	n.Bandwidth = 1 << 20 // 1 MiB/s: a 256 KiB piece takes 250 ms
	a, b := n.Add("a:1", nil, nil), n.Add("b:1", nil, nil)
	e, other := &end{node: a, open: true}, &end{node: a, open: true}
	pe, po := &end{node: b, open: true, peer: e}, &end{node: b, open: true, peer: other}
	e.peer, other.peer = pe, po
	if n.frame(e, event{kind: evProbe, n: 1}) {
		t.Fatal("a frame on an idle connection waited")
	}
	const pieceNs = int64(250 * time.Millisecond)
	a.linkBusy = true // the link is sending something else: nothing starts yet
	for i := 0; i < 20; i++ {
		e.pieces = append(e.pieces, piece{ns: pieceNs})
		e.queuedNs += pieceNs
	}
	if !n.frame(e, event{kind: evProbe, n: 2}) {
		t.Fatal("a frame behind 5 MiB did not wait")
	}
	at := -1
	for i, p := range e.pieces {
		if p.frame != nil {
			at = i
		}
	}
	if at != 16 { // 16 x 256 KiB = the 4 MiB send buffer ahead of it
		t.Fatalf("frame queued at %d, want 16 (a send buffer of bytes ahead of it)", at)
	}
	if n.frame(other, event{kind: evProbe, n: 3}) {
		t.Fatal("another connection's frame waited behind this one's bytes")
	}
}
