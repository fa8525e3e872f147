package lab

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/kvp2p/kvp2p/internal/drive"
	pb "github.com/kvp2p/kvp2p/internal/engineapi/enginepb"
	"github.com/kvp2p/kvp2p/internal/scenario"
)

// refused are the fault kinds the lab cannot make for real, and why. It
// refuses a scenario with one rather than approximate it.
var refused = map[scenario.FaultKind]string{
	scenario.Delay: "netem is not available in this machine's kernel, and no other qdisc delays packets",
}

// CheckKinds refuses a scenario with a fault kind the lab cannot make.
func CheckKinds(sc *scenario.Scenario) error {
	for _, f := range sc.Faults {
		if why, ok := refused[f.Kind]; ok {
			return fmt.Errorf("scenario %s, line %d: the lab cannot make fault %q for real: %s; refusing rather than approximating it",
				sc.Name, f.Line, f.Kind, why)
		}
	}
	return nil
}

// warm opens a session from every consumer to every source before time 0,
// as a fleet that has been running has them (the simulator and the demo
// do the same).
func (r *run) warm(ctx context.Context) error {
	deadline := time.Now().Add(10 * time.Second)
	for _, c := range r.cons {
		nd := r.nodeOf(c)
		for _, s := range r.srcs {
			hit, err := drive.Warm(ctx, nd, r.target(s), "warm-"+c.id+"-"+s.id, deadline, tick)
			if err != nil {
				if ctx.Err() != nil {
					return err
				}
				return fmt.Errorf("warming %s to %s: %w", c.id, s.id, err)
			}
			if !hit {
				return fmt.Errorf("warming %s to %s: no session within 10 s (see %s and %s)", c.id, s.id, c.logPath, s.logPath)
			}
		}
	}
	return drive.Sleep(ctx, warmup/2)
}

func (r *run) loop(ctx context.Context) error {
	lastPoll, lastProgress, lastCheck := time.Now(), time.Now(), time.Now()
	return drive.Steps(ctx, r.zero, r.sc.Duration, tick, func(now time.Duration, _ time.Time) error {
		stepStart := time.Now()
		n := 0
		for n < len(r.faults) && r.faults[n].At <= now {
			n++
		}
		for _, ft := range dueOrder(r.faults[:n]) {
			t0 := time.Now()
			if err := r.fault(ft); err != nil {
				return fmt.Errorf("fault at %v (%s %s): %w", ft.At, ft.Kind, ft.Target, err)
			}
			r.progress("fault %s %s due at %v made at %v, took %v", ft.Kind, ft.Target, ft.At,
				(t0.Sub(r.zero)).Truncate(time.Millisecond), time.Since(t0).Truncate(time.Millisecond))
		}
		r.faults = r.faults[n:]
		t1 := time.Now()
		r.wl.Step(now)
		r.steps.wl += time.Since(t1)
		if time.Since(lastPoll) >= 50*time.Millisecond {
			t2 := time.Now()
			r.pollSources()
			r.steps.polls += time.Since(t2)
			lastPoll = time.Now()
		}
		if r.soak != nil && time.Since(lastCheck) >= soakCheckEvery {
			r.check(ctx, now)
			lastCheck = time.Now()
		}
		if r.opt.Progress != nil && time.Since(lastProgress) >= 5*time.Second {
			n, res := r.wl.Counts()
			fmt.Fprintf(r.opt.Progress, "  %s %s t=%v: %d/%d resolved\n", r.sc.Name, r.policy, now.Truncate(time.Second), res, n)
			lastProgress = time.Now()
		}
		r.steps.add(time.Since(stepStart))
		return nil
	}, func(now time.Duration) { r.wl.Step(now) })
}

// dueOrder orders the faults due at one step so that what lasts (a
// firewall rule, a qdisc, a stop) is in place before what peers notice at
// once (a reset, a kill): in the scenario they happen at the same instant,
// and a peer that reacts to the reset must already find the rest failed,
// as in the simulator. Heals come first, as they end earlier faults.
func dueOrder(fs []scenario.Fault) []scenario.Fault {
	rank := func(k scenario.FaultKind) int {
		switch k {
		case scenario.Heal:
			return 0
		case scenario.CloseControl, scenario.Crash, scenario.Restart:
			return 2
		}
		return 1
	}
	out := slices.Clone(fs)
	slices.SortStableFunc(out, func(a, b scenario.Fault) int { return rank(a.Kind) - rank(b.Kind) })
	return out
}

// pollSources steps the engines the workload does not poll (the sources'
// stores end there), and notices sidecars that died. The steps go out
// together, as the engines of a fleet step independently: one after
// another, each waiting for its sidecar to be scheduled, they took a
// seventh of the driver's time on a loaded machine and made it late for
// everything else (arrivals, the consumers' polls).
func (r *run) pollSources() {
	var wg sync.WaitGroup
	for _, rk := range r.ranks {
		e := rk.eng
		if e == nil || rk.stalled {
			continue
		}
		if e.dead.Load() {
			e.sidecarGone()
			continue
		}
		wg.Go(func() { _, _ = e.step(&pb.StepRequest{}) })
	}
	wg.Wait()
}

// fault makes one timeline entry happen to every rank it targets. The
// nftables and tc changes of one entry are made in one call per host, so
// that a pod's ranks fail at the same instant, not one after another.
func (r *run) fault(ft scenario.Fault) error {
	touched := map[*hostNet]bool{}
	for _, id := range r.sc.Ranks(ft.Target) {
		rk := r.byID[id]
		if rk == nil {
			continue
		}
		hn := rk.hn
		switch ft.Kind {
		case scenario.Crash:
			r.crash(rk)
			clearNet(rk, touched) // a dead process holds nothing back
		case scenario.Restart:
			r.crash(rk)
			clearNet(rk, touched)
			if err := r.start(rk); err != nil {
				return err
			}
		case scenario.Stall:
			if rk.p != nil && !rk.stalled {
				if err := rk.p.signal(syscall.SIGSTOP); err != nil {
					return err
				}
				rk.stalled = true
			}
		case scenario.Blackhole:
			hn.black[rk.port] = true
			touched[hn] = true
		case scenario.BlackholeData:
			hn.data[rk.port] = true
			touched[hn] = true
		case scenario.CloseControl:
			if rk.p != nil {
				if err := resetConns(rk.ns, rk.port); err != nil {
					return err
				}
			}
		case scenario.Slow:
			hn.slow[rk.port] = ft.BytesPerSec
			touched[hn] = true
		case scenario.GoodbyeIdle:
			if err := r.admin(rk, syscall.SIGUSR1, "SIGUSR1: said goodbye"); err != nil {
				return err
			}
		case scenario.RefuseHandshake:
			if !rk.refusing {
				if err := r.admin(rk, syscall.SIGUSR2, "SIGUSR2: handshakes"); err != nil {
					return err
				}
				rk.refusing = rk.p != nil && !rk.stalled
			}
		case scenario.Heal:
			clearNet(rk, touched)
			if rk.stalled {
				if err := rk.p.signal(syscall.SIGCONT); err != nil {
					return err
				}
				rk.stalled = false
			}
			if rk.refusing {
				if err := r.admin(rk, syscall.SIGUSR2, "SIGUSR2: handshakes"); err != nil {
					return err
				}
				rk.refusing = false
			}
			if rk.p == nil {
				if err := r.start(rk); err != nil {
					return err
				}
			}
		default:
			return fmt.Errorf("the lab cannot make fault %q", ft.Kind)
		}
	}
	return applyNets(touched)
}

// clearNet ends the rank's network faults in its host's state; applyNets
// makes the change.
func clearNet(rk *rank, touched map[*hostNet]bool) {
	hn := rk.hn
	_, slow := hn.slow[rk.port]
	if slow || hn.black[rk.port] || hn.data[rk.port] {
		delete(hn.black, rk.port)
		delete(hn.data, rk.port)
		delete(hn.slow, rk.port)
		touched[hn] = true
	}
}

// applyNets rewrites the rules and qdiscs of the hosts that changed.
func applyNets(touched map[*hostNet]bool) error {
	for hn := range touched {
		if err := hn.apply(); err != nil {
			return err
		}
		if hn.slowDirty() {
			if err := hn.applySlow(); err != nil {
				return err
			}
		}
	}
	return nil
}

// finish ends the run: every fault healed, what is unresolved is stuck
// and finished; then the engines wait for their chunks to come back (jobs
// done, pins released) for at most drainMax. What a live sidecar still
// holds after that is a leaked slot.
func (r *run) finish(ctx context.Context) int {
	touched := map[*hostNet]bool{}
	for _, rk := range r.ranks {
		clearNet(rk, touched)
		if rk.stalled && rk.p != nil {
			_ = rk.p.signal(syscall.SIGCONT)
			rk.stalled = false
		}
	}
	_ = applyNets(touched)
	r.wl.EndRun()
	deadline := time.Now().Add(drainMax)
	for {
		busy, held := false, 0
		for _, rk := range r.ranks {
			e := rk.eng
			if e == nil || e.dead.Load() {
				continue
			}
			resp, err := e.step(&pb.StepRequest{})
			if err == nil && resp.PendingWork {
				busy = true
			}
			held += e.inUse()
		}
		if (!busy && held == 0) || time.Now().After(deadline) || ctx.Err() != nil {
			return held
		}
		time.Sleep(50 * time.Millisecond)
	}
}
