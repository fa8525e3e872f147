package sim

import (
	"context"
	"fmt"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/report"
	"github.com/kvp2p/kvp2p/internal/scenario"
)

// Variant is one (timer set, domains) a policy runs with.
type Variant struct {
	Timers      string // "" : the policy's preset
	DropDomains bool
}

// Matrix is what `kvp2p sim` runs: every scenario under every policy, each
// with one Variant or, under Ablation, the ablation's (Variants).
type Matrix struct {
	Scenarios []*scenario.Scenario
	Policies  []string
	Seed      int64   // 0: each scenario's own
	One       Variant // without Ablation
	Ablation  bool
}

// Run runs the matrix in order (scenario, then policy, then variant) and
// hands each run to add as it ends; it stops at the first error, or when
// ctx ends between runs.
func (m Matrix) Run(ctx context.Context, add func(report.Run) error) error {
	for _, sc := range m.Scenarios {
		for _, p := range m.Policies {
			for _, v := range Variants(p, m.Ablation, m.One) {
				if err := ctx.Err(); err != nil {
					return err
				}
				res, err := Run(sc, p, Options{Seed: m.Seed, TimerSet: v.Timers, DropDomains: v.DropDomains})
				if err != nil {
					return fmt.Errorf("%s under %s: %w", sc.Name, p, err)
				}
				if err := add(report.Run{Policy: p, Requests: res.Requests, Report: res.Report}); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// Variants is what policy p runs with: one, or the ablation's matrix (both
// timer sets; domain also with its domains dropped, which changes nothing
// for the policies that ignore domains).
func Variants(p string, ablation bool, one Variant) []Variant {
	if !ablation {
		return []Variant{one}
	}
	vs := []Variant{{Timers: TimersVLLM}, {Timers: TimersKVP2P}}
	if p == health.Domain {
		vs = append(vs, Variant{TimersVLLM, true}, Variant{TimersKVP2P, true})
	}
	return vs
}
