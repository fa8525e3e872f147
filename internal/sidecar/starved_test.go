package sidecar

import (
	"context"
	"testing"
	"time"

	pb "github.com/kvp2p/kvp2p/internal/engineapi/enginepb"
	"github.com/kvp2p/kvp2p/internal/metrics"
	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// A symmetric lookup from B waits at A's sidecar for A's engine to answer
// an ask, and A's engine takes longer than A's serve_timeout: starved of
// CPU (its processes runnable, none stopped), frozen (stopped), or idle.
// The timers: A's serve_timeout serve; B's lookup_timeout look, shorter
// than the starved engine's answer (starvedAnswer), so that only A's
// "still pending" answers keep B's lookup from timing out; the grace
// ((1+starvedGrace)*serve) ends well after the answer. The margins (a
// second from A's first "pending" to B's deadline, 1.5 s from the answer
// to the end of A's grace) are for a loaded machine, where a sidecar's
// loop can wait that long for a CPU.
const (
	serve         = time.Second
	look          = 2 * time.Second
	starvedAnswer = 2500 * time.Millisecond
)

// starvedPair starts A (its engine's processes in the given state, a
// request in flight unless idle, A's engine holding key k and answering
// asks answer late, or never if answer is 0) and B (a request whose KV
// source is A), with the timers above.
func starvedPair(t *testing.T, runnable, stopped, idle bool, answer time.Duration) (a, b *sidecar, ea, eb *fakeEngine, k wire.Key) {
	t.Helper()
	a = startSidecar(t, func(c *sidecarConfig) {
		c.Engine.ServeTimeout = serve
		c.tree = func(int) (bool, bool) { return runnable, stopped }
	})
	b = startSidecar(t, func(c *sidecarConfig) { c.Timers.LookupTimeout = look })
	ea, eb = attach(t, a), attach(t, b)
	k = nodetest.Key("starved", 0)
	ea.store(a, "prod", nil, []wire.Key{k}, 3)
	if idle {
		ea.mustStep(&pb.StepRequest{Finished: []string{"prod"}, EndStep: true})
	} else {
		ea.mustStep(&pb.StepRequest{NewRequests: []*pb.NewRequest{{ReqId: "other"}}, EndStep: true})
	}
	ea.mu.Lock()
	ea.askDelay, ea.holdAsks = answer, answer == 0
	ea.mu.Unlock()
	params := &pb.TransferParams{RemoteKvSource: remoteOf(t, a), KvRequestId: "kv-starved"}
	eb.mustStep(&pb.StepRequest{NewRequests: []*pb.NewRequest{{ReqId: "cons", Params: params}}})
	return a, b, ea, eb, k
}

// lookTimed looks k up at B until it is answered: the verdict, and how
// long it took.
func lookTimed(eb *fakeEngine, k wire.Key) (pb.Verdict, time.Duration) {
	start := time.Now()
	seen := eb.lookUntil("cons", k)
	return seen[len(seen)-1], time.Since(start)
}

func counters(t *testing.T, s *sidecar) metrics.Counters {
	t.Helper()
	snap, err := s.node.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return snap.Counters
}

// A starved engine's ask gets more serve_timeouts, and B hears "still
// pending" meanwhile: B's lookup outlives its own lookup_timeout and is a
// HIT when A's engine answers within the grace. Before, A answered MISS
// at serve_timeout and B prefilled (a false fallback).
func TestStarvedEngineKeepsLookupPending(t *testing.T) {
	_, b, _, eb, k := starvedPair(t, true, false, false, starvedAnswer)
	v, took := lookTimed(eb, k)
	if v != pb.Verdict_VERDICT_HIT {
		t.Fatalf("B's lookup at a starved engine: %v after %v, want HIT", v, took)
	}
	if took < starvedAnswer {
		t.Fatalf("HIT after %v, before the engine answered (%v): the test did not starve it", took, starvedAnswer)
	}
	t.Logf("B's lookup HIT %v after it started (engine answered at %v; B's lookup_timeout %v)", took, starvedAnswer, look)
	if got := counters(t, b).LookupPending; got.Received == 0 || got.Ignored != 0 {
		t.Fatalf("B's pending counts %+v: want some received, none ignored", got)
	}
}

// missAfter checks that B's lookup is answered MISS no sooner than least,
// and that A said "pending" want times.
func missAfter(t *testing.T, a *sidecar, eb *fakeEngine, k wire.Key, least time.Duration, want uint64) {
	t.Helper()
	v, took := lookTimed(eb, k)
	if v != pb.Verdict_VERDICT_MISS {
		t.Fatalf("B's lookup: %v after %v, want MISS", v, took)
	}
	if took < least {
		t.Fatalf("MISS after %v, before %v", took, least)
	}
	if got := counters(t, a).LookupPending.Sent; got != want {
		t.Fatalf("A said pending %d times, want %d", got, want)
	}
	t.Logf("B's lookup MISS %v after it started (serve_timeout %v)", took, serve)
}

// A stopped (frozen) engine or worker, a hung one (not runnable), and an
// idle engine however its processes look, get no grace: the peer's lookup
// is answered MISS at serve_timeout as before, with no "still pending".
func TestFrozenOrIdleEngineAnswersMissAtServeTimeout(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		runnable, stopped, idle bool
	}{
		{name: "frozen", runnable: true, stopped: true},
		{name: "hung", runnable: false, stopped: false},
		{name: "idle", runnable: true, idle: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, _, eb, k := starvedPair(t, tc.runnable, tc.stopped, tc.idle, 0)
			missAfter(t, a, eb, k, serve, 0)
			if got := counters(t, b).LookupPending.Received; got != 0 {
				t.Fatalf("B heard pending %d times", got)
			}
		})
	}
}

// A starved engine that never answers: the grace runs out and A answers
// MISS after (1+starvedGrace) serve_timeouts, within B's cap, having said
// "pending" once per serve_timeout added.
func TestStarvedEngineGraceRunsOut(t *testing.T) {
	a, _, _, eb, k := starvedPair(t, true, false, false, 0)
	missAfter(t, a, eb, k, (1+starvedGrace)*serve, starvedGrace)
}
