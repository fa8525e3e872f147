package sim

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/scenario"
)

// scaleScenario is a large fleet: pods source pods of 8 ranks (each its
// own domain, 8 pods per host) and consumers decode ranks, PD at rate
// requests per second per consumer, for 60 s; one source pod crashes at
// 30 s.
func scaleScenario(pods, consumers int, rate float64) *scenario.Scenario {
	sc := &scenario.Scenario{Name: "scale", Duration: 60 * time.Second, Seed: 1}
	var srcs []string
	for i := range pods {
		name := fmt.Sprintf("src-%d", i)
		sc.Pods = append(sc.Pods, scenario.Pod{
			Name: name, Host: fmt.Sprintf("10.1.%d.%d", i/8/250, i/8%250), Ranks: 8,
			BasePort: 7777 + 8*(i%8), Domain: "pod-" + name,
		})
		srcs = append(srcs, name)
	}
	sc.Pods = append(sc.Pods, scenario.Pod{Name: "dst", Host: "10.2.0.1", Ranks: consumers, BasePort: 7777})
	sc.Workload = scenario.Workload{
		Mode: scenario.ModePD, Rate: rate, Blocks: 16, BlockBytes: 16 << 10,
		Sources: srcs, Consumers: []string{"dst"}, Stop: 59 * time.Second,
	}
	sc.Faults = []scenario.Fault{{At: 30 * time.Second, Kind: scenario.Crash, Target: scenario.Target{Pod: "src-0", All: true}}}
	return sc
}

// scaleOptions: no warm-up (100 x 8000 sessions), a peer cap above the
// ~600 sources each consumer meets in 60 s, and small source stores.
func scaleOptions(policy string) Options {
	tm := loads.PresetTimers(policy)
	tm.MaxPeers = 2048
	return Options{NoWarmup: true, Timers: &tm, SourceSlots: 256, Slots: 16384}
}

// BenchmarkScale: 1000 pods x 8 ranks + 100 consumer ranks, 60 s of
// virtual time, at 5 and 10 requests/s per consumer. Run with
// -benchtime=1x; each run reports its wall time, the process's CPU time
// (user+sys, all threads: on a shared machine the steadier figure),
// events and ticks.
func BenchmarkScale(b *testing.B) {
	for _, rate := range []float64{5, 10} {
		for _, p := range []string{health.PerPeer, "domain"} {
			b.Run(fmt.Sprintf("%s/rate=%g", p, rate), func(b *testing.B) {
				sc := scaleScenario(1000, 100, rate)
				for b.Loop() {
					start, cpu0 := time.Now(), nodetest.CPUTime()
					res, err := Run(sc, p, scaleOptions(p))
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(res.Events), "events")
					b.ReportMetric(float64(res.Ticks), "ticks")
					b.ReportMetric(float64(res.Report.Requests), "requests")
					b.ReportMetric(time.Since(start).Seconds(), "wall-s")
					b.ReportMetric((nodetest.CPUTime() - cpu0).Seconds(), "cpu-s")
					b.Logf("%+v drained=%v nodes=%d", res.Report, res.Drained, res.Nodes)
				}
			})
		}
	}
}

// BenchmarkPlanningScale: 10,000 pods x 8 ranks + 100 consumer ranks, 60 s
// of virtual time at 5 requests/s per consumer, domain policy: the size a
// capacity plan asks about. Reports wall and CPU time and the process's
// peak RSS (Linux: VmHWM; it includes whatever ran before in the same
// process, so run it alone):
//
//	go test ./internal/sim -run '^$' -bench PlanningScale -benchtime=1x -timeout 2h
func BenchmarkPlanningScale(b *testing.B) {
	sc := scaleScenario(10000, 100, 5)
	for b.Loop() {
		start, cpu0 := time.Now(), nodetest.CPUTime()
		res, err := Run(sc, "domain", scaleOptions("domain"))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(res.Events), "events")
		b.ReportMetric(float64(res.Ticks), "ticks")
		b.ReportMetric(time.Since(start).Seconds(), "wall-s")
		b.ReportMetric((nodetest.CPUTime() - cpu0).Seconds(), "cpu-s")
		b.ReportMetric(float64(peakRSS())/(1<<20), "peak-rss-MiB")
		b.Logf("%+v drained=%v nodes=%d", res.Report, res.Drained, res.Nodes)
	}
}

// peakRSS is VmHWM from /proc/self/status, or 0 where there is none.
func peakRSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
