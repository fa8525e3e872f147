// Package scenariotest holds the scenario fixtures that the report's and
// the chart's tests share. Only tests import it.
package scenariotest

import (
	"time"

	"github.com/kvp2p/kvp2p/internal/scenario"
)

// Fleet is a 40 s PD scenario with faults: pod a (4 ranks on h1) serves
// pod d (1 rank on h2) one block a second.
func Fleet(faults ...scenario.Fault) *scenario.Scenario {
	const s = time.Second
	return &scenario.Scenario{
		Name: "t", Duration: 40 * s, Seed: 1,
		Pods: []scenario.Pod{{Name: "a", Host: "h1", Ranks: 4, BasePort: 7777}, {Name: "d", Host: "h2", Ranks: 1, BasePort: 7777}},
		Workload: scenario.Workload{Mode: scenario.ModePD, Rate: 1, Blocks: 1, BlockBytes: 1, Sources: []string{"a"},
			Consumers: []string{"d"}, Stop: 40 * s},
		Faults: faults,
	}
}

// Fault is a fault of kind k at the given time on target ("pod" or
// "pod/rank"); a malformed target panics (a broken test).
func Fault(at time.Duration, k scenario.FaultKind, target string) scenario.Fault {
	t, err := scenario.ParseTarget(target)
	if err != nil {
		panic(err)
	}
	return scenario.Fault{At: at, Kind: k, Target: t}
}
