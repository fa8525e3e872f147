package sidecar

import (
	"os"
	"testing"

	pb "github.com/kvp2p/kvp2p/internal/engineapi/enginepb"
	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// An engine's region truncated under the sidecar's mapping, while a load
// is live, faults (SIGBUS) where the data path touches it. The data
// connection fails instead of the process: the load fails cleanly, its
// keys answer MISS, and both sidecars go on. Without the fault guard this
// test binary dies.
func TestEngineRegionTruncatedUnderLoad(t *testing.T) {
	for _, side := range []string{"producer", "consumer"} {
		t.Run(side, func(t *testing.T) {
			p, d := startSidecar(t, nil), startSidecar(t, nil)
			ep, ed := attach(t, p), attach(t, d)
			keys := []wire.Key{nodetest.Key("trunc-"+side, 0), nodetest.Key("trunc-"+side, 1)}
			prod := &pb.TransferParams{RemoteDecoder: remoteOf(t, d), KvRequestId: "kv-" + side}
			cons := &pb.TransferParams{RemotePrefiller: remoteOf(t, p), KvRequestId: "kv-" + side}
			ep.write(p, keys, 5, 6)
			ed.mustStep(&pb.StepRequest{NewRequests: []*pb.NewRequest{{ReqId: "dec", Params: cons}}})
			for _, k := range keys {
				ed.lookUntil("dec", k)
			}
			j := ed.job("dec", keys, 9, 10)
			resp := ed.mustStep(&pb.StepRequest{Loads: []*pb.Job{j}, EndStep: true})
			// The load is live (the prefiller has not stored yet): cut the
			// region file of one side to nothing under its mapping.
			victim := map[string]*sidecar{"producer": p, "consumer": d}[side]
			if err := os.Truncate(victim.region, 0); err != nil {
				t.Fatal(err)
			}
			ep.submitStore("pre", prod, keys, 5, 6)
			if done := ed.waitJob(j.JobId, resp); done.Success {
				t.Fatalf("a load through a truncated %s region succeeded: %+v", side, done)
			}
			if v := ed.lookUntil("dec", keys[0]); v[len(v)-1] != pb.Verdict_VERDICT_MISS {
				t.Fatalf("key of the failed load: %v, want MISS", v)
			}
			for _, s := range []*sidecar{p, d} {
				if _, err := s.node.Status(t.Context()); err != nil {
					t.Fatalf("a sidecar stopped after the fault: %v", err)
				}
			}
		})
	}
}
