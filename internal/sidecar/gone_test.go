package sidecar

import (
	"bytes"
	"strings"
	"testing"
	"time"

	pb "github.com/kvp2p/kvp2p/internal/engineapi/enginepb"
	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/store"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// goneBound is how soon after its engine's detach a peer waiting on that
// engine must be answered: the README's "falls back within a second". The
// answer is one loop turn on each sidecar and a message; the peer's own
// timers are set far beyond the bound (patientDecoder), so only the
// producer's answer can end the wait in time.
const goneBound = time.Second

// patientDecoder gives a decoder's sidecar timers that cannot end a load
// within goneBound: a failure in time is the producer's doing.
func patientDecoder(c *sidecarConfig) {
	c.Timers.LoadTimeoutPD = time.Minute
	c.Timers.StallTimeout = -1
	c.Timers.LoadStartBudget = -1
}

// fetchesAt is how many PD request ids a peer's fetch is bound to at s.
func fetchesAt(t *testing.T, s *sidecar) int {
	t.Helper()
	var n int
	if err := s.node.Do(func(now time.Time) { n = s.node.Table().View(now).Fetches }); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitJobWithin steps e until job id is reported or within passes; it
// returns the result and when it was seen.
func waitJobWithin(t *testing.T, e *fakeEngine, id uint64, resp *pb.StepResponse, within time.Duration) (*pb.JobDone, time.Time) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		for _, d := range resp.Finished {
			if d.JobId == id {
				return d, time.Now()
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d: no result within %v", id, within)
		}
		<-time.After(2 * time.Millisecond)
		resp = e.mustStep(&pb.StepRequest{EndStep: true})
	}
}

// Engine A (a PD prefiller) goes while B's PD load waits at A's sidecar:
// B's load fails at once, whether A's engine had registered the request or
// not, and whether B's fetch reached A before or after the engine went (a
// restarted engine in between or not). Before, A's sidecar failed only its
// own engine's jobs and parked stores, and B waited for its PD load
// timeout (30 s; 23.7 s after the kill with real engines).
func TestEngineGoneFailsPeersPDFetch(t *testing.T) {
	cases := []struct {
		name       string
		registered bool // A's engine registered the request (no store yet)
		fetchFirst bool // B's fetch is bound at A before A's engine goes
		restart    bool // a new engine attaches to A before B's fetch (only with !fetchFirst)
	}{
		{name: "unregistered, fetch waiting", fetchFirst: true},
		{name: "unregistered, fetch after the engine went"},
		{name: "registered, fetch waiting", registered: true, fetchFirst: true},
		{name: "registered, fetch after the engine went", registered: true},
		{name: "registered, fetch after a new engine attached", registered: true, restart: true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := startSidecar(t, nil), startSidecar(t, patientDecoder)
			ea, eb := attach(t, a), attach(t, b)
			kv := "kv-gone-" + string(rune('a'+i))
			keys := []wire.Key{nodetest.Key(kv, 0), nodetest.Key(kv, 1)}
			cons := &pb.TransferParams{RemotePrefiller: remoteOf(t, a), KvRequestId: kv}
			eb.mustStep(&pb.StepRequest{NewRequests: []*pb.NewRequest{{ReqId: "dec", Params: cons}}})
			if seen := eb.lookUntil("dec", keys[0]); seen[len(seen)-1] != pb.Verdict_VERDICT_HIT {
				t.Fatalf("PD lookup %v, want HIT", seen)
			}
			if tc.registered {
				prod := &pb.TransferParams{RemoteDecoder: remoteOf(t, b), KvRequestId: kv}
				ea.mustStep(&pb.StepRequest{NewRequests: []*pb.NewRequest{{ReqId: "pre", Params: prod}}, EndStep: true})
			}
			j := eb.job("dec", keys, 2, 3)
			var resp *pb.StepResponse
			if tc.fetchFirst {
				resp = eb.mustStep(&pb.StepRequest{Loads: []*pb.Job{j}, EndStep: true})
				nodetest.WaitFor(t, func() bool { return fetchesAt(t, a) == 1 })
			}
			gone := time.Now()
			ea.detach()
			if tc.restart {
				nodetest.WaitFor(t, func() bool {
					_, err := tryAttach(t, a, engChunks, nodetest.BlockBytes, a.region)
					return err == nil
				})
			}
			if !tc.fetchFirst {
				if !tc.restart {
					// The detach is the loop's before the fetch is.
					nodetest.WaitFor(t, func() bool {
						var attached bool
						_ = a.node.Do(func(time.Time) { attached = a.sc.eng.Attached() })
						return !attached
					})
				}
				gone = time.Now()
				resp = eb.mustStep(&pb.StepRequest{Loads: []*pb.Job{j}, EndStep: true})
			}
			d, at := waitJobWithin(t, eb, j.JobId, resp, 10*time.Second)
			if d.Success || len(d.Successful) != 0 {
				t.Fatalf("load from a gone engine: %+v", d)
			}
			if took := at.Sub(gone); took > goneBound {
				t.Fatalf("B's load failed %v after A's engine went (%q), want within %v", took, d.Reason, goneBound)
			} else {
				t.Logf("B's load failed %v after A's engine went: %s", took, d.Reason)
			}
			if strings.Contains(d.Reason, "timeout") || strings.Contains(d.Reason, "timed out") {
				t.Fatalf("B's load failed by its own timer (%q), not by A's answer", d.Reason)
			}
			// B's chunks are its engine's again, and nothing at A waits for
			// the old registration.
			nodetest.WaitFor(t, func() bool {
				return chunkState(t, b, store.Slot(2)) == store.StateFree && chunkState(t, b, store.Slot(3)) == store.StateFree
			})
			nodetest.WaitFor(t, func() bool { return fetchesAt(t, a) == 0 })
		})
	}
}

// The symmetric case: B's lookup waits at A's sidecar for A's engine to
// answer an ask (ServeAsk) when A's engine goes: B hears MISS at once, not
// at A's serve timeout (5 s here).
func TestEngineGoneAnswersPeersLookup(t *testing.T) {
	a, b := startSidecar(t, nil), startSidecar(t, nil)
	ea, eb := attach(t, a), attach(t, b)
	ea.mu.Lock()
	ea.holdAsks = true // the engine never steps: its ask stays pending
	ea.mu.Unlock()
	k := nodetest.Key("gone-sym", 0)
	eb.mustStep(&pb.StepRequest{NewRequests: []*pb.NewRequest{{ReqId: "cons",
		Params: &pb.TransferParams{RemoteKvSource: remoteOf(t, a), KvRequestId: "kv-gone-sym"}}}})
	look := func() pb.Verdict {
		resp := eb.mustStep(&pb.StepRequest{Lookups: []*pb.LookupBatch{{ReqId: "cons", Keys: [][]byte{bytes.Clone(k[:])}}}, EndStep: true})
		return resp.Lookups[0].Verdicts[0]
	}
	nodetest.WaitFor(t, func() bool {
		if v := look(); v != pb.Verdict_VERDICT_RETRY {
			t.Fatalf("lookup answered %v before A's engine did", v)
		}
		ea.mu.Lock()
		defer ea.mu.Unlock()
		return ea.asks > 0
	})
	gone := time.Now()
	ea.detach()
	deadline := time.Now().Add(10 * time.Second)
	v := look()
	for ; v == pb.Verdict_VERDICT_RETRY && time.Now().Before(deadline); v = look() {
		<-time.After(2 * time.Millisecond)
	}
	took := time.Since(gone)
	if v != pb.Verdict_VERDICT_MISS {
		t.Fatalf("lookup at a gone engine: %v, want MISS", v)
	}
	if took > goneBound {
		t.Fatalf("B's lookup answered MISS %v after A's engine went, want within %v", took, goneBound)
	}
	t.Logf("B's lookup answered MISS %v after A's engine went", took)
}
