package sidecar

import (
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/wire"

	pb "github.com/kvp2p/kvp2p/internal/engineapi/enginepb"
)

// stepBound is how soon after its fetch reached a prefiller whose engine
// stopped stepping a PD decoder's load must fail: engine.step_timeout
// (default 1 s) for the probe, plus the answer's way back (goneBound, as
// for a gone engine).
const stepBound = time.Second + goneBound

// pdWait sets up B's PD load of two keys from A and returns it once B's
// fetch waits at A's sidecar (A has stored nothing).
func pdWait(t *testing.T, a *sidecar, eb *fakeEngine, kv string) (*pb.Job, *pb.StepResponse, []wire.Key) {
	t.Helper()
	keys := []wire.Key{nodetest.Key(kv, 0), nodetest.Key(kv, 1)}
	cons := &pb.TransferParams{RemotePrefiller: remoteOf(t, a), KvRequestId: kv}
	eb.mustStep(&pb.StepRequest{NewRequests: []*pb.NewRequest{{ReqId: "dec", Params: cons}}})
	if seen := eb.lookUntil("dec", keys[0]); seen[len(seen)-1] != pb.Verdict_VERDICT_HIT {
		t.Fatalf("PD lookup %v, want HIT", seen)
	}
	j := eb.job("dec", keys, 2, 3)
	resp := eb.mustStep(&pb.StepRequest{Loads: []*pb.Job{j}, EndStep: true})
	nodetest.WaitFor(t, func() bool { return fetchesAt(t, a) == 1 })
	return j, resp, keys
}

// A PD prefiller's engine stops stepping (its worker hung or frozen) while
// it has requests in flight and its stream to the sidecar lives: the
// decoder's load, waiting at A's sidecar for stores A will not make, fails
// within step_timeout and the answer's way back. Before, it waited for its
// PD load timeout (30 s by default; a minute here: patientDecoder).
func TestStoppedEngineFailsPeersPDFetch(t *testing.T) {
	a, b := startSidecar(t, nil), startSidecar(t, patientDecoder)
	ea, eb := attach(t, a), attach(t, b)
	ea.mustStep(&pb.StepRequest{NewRequests: []*pb.NewRequest{{ReqId: "other"}}, EndStep: true}) // A serves traffic
	ea.mu.Lock()
	ea.holdAsks = true // from now on A's engine does not step
	ea.mu.Unlock()
	j, resp, _ := pdWait(t, a, eb, "kv-stopped")
	waiting := time.Now()
	d, at := waitJobWithin(t, eb, j.JobId, resp, 10*time.Second)
	if d.Success || len(d.Successful) != 0 {
		t.Fatalf("load from a stopped engine: %+v", d)
	}
	if strings.Contains(d.Reason, "timeout") || strings.Contains(d.Reason, "timed out") {
		t.Fatalf("B's load failed by its own timer (%q), not by A's answer", d.Reason)
	}
	if took := at.Sub(waiting); took > stepBound {
		t.Fatalf("B's load failed %v after its fetch waited at A (%q), want within %v", took, d.Reason, stepBound)
	} else {
		t.Logf("B's load failed %v after its fetch waited at A: %s", took, d.Reason)
	}
	ea.mu.Lock()
	asks := ea.asks
	ea.mu.Unlock()
	if asks == 0 {
		t.Fatal("A's sidecar never probed its engine")
	}
	nodetest.WaitFor(t, func() bool { return fetchesAt(t, a) == 0 })
}

// No false fallback: a decoder's fetch waits at A for as long as A's
// engine steps (it answers the probes), or is idle (vLLM 0.32's engine does
// not step without work: the router has yet to send the prefill), well past
// step_timeout; then A prefills and B loads.
func TestWaitingFetchSurvivesSteppingOrIdleEngine(t *testing.T) {
	for _, tc := range []struct {
		name string
		busy bool // A has a request in flight and answers asks; else idle, answering nothing
	}{{name: "stepping", busy: true}, {name: "idle"}} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := startSidecar(t, nil), startSidecar(t, patientDecoder)
			ea, eb := attach(t, a), attach(t, b)
			if tc.busy {
				ea.mustStep(&pb.StepRequest{NewRequests: []*pb.NewRequest{{ReqId: "other"}}, EndStep: true})
			} else {
				ea.mu.Lock()
				ea.holdAsks = true
				ea.mu.Unlock()
			}
			kv := "kv-wait-" + tc.name
			j, resp, keys := pdWait(t, a, eb, kv)
			for end := time.Now().Add(5 * time.Second / 2); time.Now().Before(end); {
				for _, d := range resp.Finished {
					if d.JobId == j.JobId {
						t.Fatalf("B's load ended while A's engine was %s: %+v", tc.name, d)
					}
				}
				<-time.After(20 * time.Millisecond)
				resp = eb.mustStep(&pb.StepRequest{EndStep: true})
			}
			ea.write(a, keys, 5, 6)
			prod := &pb.TransferParams{RemoteDecoder: remoteOf(t, b), KvRequestId: kv}
			ea.submitStore("pre", prod, keys, 5, 6)
			if d, _ := waitJobWithin(t, eb, j.JobId, resp, 10*time.Second); !d.Success {
				t.Fatalf("B's load after A prefilled: %+v", d)
			}
			if got := readChunk(t, b, 2); string(got) != string(nodetest.Bytes(keys[0])) {
				t.Fatal("B's chunk does not hold A's block")
			}
		})
	}
}

// A probe unanswered past step_timeout: an engine whose processes wait
// for a CPU, none stopped, is slow, not stopped, and gets up to
// starvedGrace more step_timeouts; a stopped one (SIGSTOP of the engine or
// of its worker) or one not runnable (hung) gets none, and neither does a
// starved one past its grace. No clock: waited is given.
func TestProbeVerdictStarvedIsNotStopped(t *testing.T) {
	const to = time.Second
	starved := func() (bool, bool) { return true, false }
	stopped := func() (bool, bool) { return true, true } // the core runs, its worker is stopped
	frozen := func() (bool, bool) { return false, true }
	hung := func() (bool, bool) { return false, false }
	unread := func() (bool, bool) { t.Fatal("process state read within step_timeout"); return false, false }
	for _, tc := range []struct {
		name   string
		waited time.Duration
		grace  int
		tree   func() (bool, bool)
		stall  bool
		after  int
	}{
		{"within step_timeout", to - time.Millisecond, 0, unread, false, 0},
		{"starved at step_timeout", to, 0, starved, false, 1},
		{"starved within its grace", 2*to - time.Millisecond, 1, unread, false, 1},
		{"starved again", 2 * to, 1, starved, false, 2},
		{"starved at the last grace", 3 * to, 2, starved, false, 3},
		{"starved past its grace", 4 * to, 3, starved, true, 3},
		{"worker stopped", to, 0, stopped, true, 0},
		{"process frozen", to, 0, frozen, true, 0},
		{"hung, not runnable", to, 0, hung, true, 0},
		{"stopped after a grace", 2 * to, 1, frozen, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stall, after := probeVerdict(tc.waited, to, tc.grace, tc.tree)
			if stall != tc.stall || after != tc.after {
				t.Fatalf("probeVerdict(%v, grace %d) = %v, %d; want %v, %d", tc.waited, tc.grace, stall, after, tc.stall, tc.after)
			}
		})
	}
}
