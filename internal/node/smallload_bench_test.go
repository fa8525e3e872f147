package node

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/percentile"
)

// BenchmarkSmallLoad: one PD load of one 256 KiB block per op, from
// SubmitStore and SubmitLoad to the load's result, waited for two ways:
// wait parks in the loop (Manager.WaitFinished); poll calls PollFinished
// every 200 µs, as the benchmarks did before WaitFinished (the runtime
// then sleeps a whole millisecond when the process is otherwise idle).
// Reports the load's p50 and p99.
func BenchmarkSmallLoad(b *testing.B) {
	for _, wait := range []bool{true, false} {
		name := "poll"
		if wait {
			name = "wait"
		}
		b.Run(name, func(b *testing.B) {
			keys := nodetest.Keys("small", 1)
			p, c := benchPair(b, keys)
			var lat []float64        // µs
			for i := range b.N + 1 { // the first one untimed
				kv := fmt.Sprintf("s%d", i)
				start := time.Now()
				p.m.NewRequest("p"+kv, TransferParams{RemoteDecoder: &Remote{KVRequestID: kv}})
				sj, _ := p.m.SubmitStore("p"+kv, keys)
				c.m.NewRequest("d"+kv, nodetest.PDParams(b, kv, p.PeerID()))
				lj, _ := c.m.SubmitLoad("d"+kv, keys)
				var r JobResult
				if wait {
					r = nodetest.WaitJob(b, c.m, lj)
				} else {
					r = pollJob(b, c.m, lj)
				}
				if !r.OK {
					b.Fatalf("load: %+v", r)
				}
				if i > 0 {
					lat = append(lat, float64(time.Since(start).Nanoseconds())/1e3)
				}
				nodetest.WaitJob(b, p.m, sj)
				c.m.RequestFinished("d" + kv)
				p.m.RequestFinished("p" + kv)
			}
			b.ReportMetric(percentile.Of(lat, 50), "p50_µs")
			b.ReportMetric(percentile.Of(lat, 99), "p99_µs")
		})
	}
}

// pollJob polls m every 200 µs until job's result, for at most 30 s.
func pollJob(tb testing.TB, m *Manager, job uint64) JobResult {
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, r := range m.PollFinished() {
			if r.Job == job {
				return r
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("job %d: no result within 30 s", job)
		}
		<-time.After(200 * time.Microsecond)
	}
}
