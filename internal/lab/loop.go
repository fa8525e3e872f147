package lab

import (
	"context"
	"fmt"
	"syscall"
	"time"

	pb "github.com/kvp2p/kvp2p/internal/engineapi/enginepb"
	"github.com/kvp2p/kvp2p/internal/scenario"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/workload"
)

// refused are the fault kinds the lab cannot make for real, and why. It
// refuses a scenario with one rather than approximate it.
var refused = map[scenario.FaultKind]string{
	scenario.Delay: "netem is not available in this machine's kernel, and no other qdisc delays packets",
	scenario.GoodbyeIdle: "kvp2p serve has no signal, reload or admin call that makes it end its sessions " +
		"as an idle eviction yet",
	scenario.RefuseHandshake: "kvp2p serve has no signal, reload or admin call that makes it refuse handshakes " +
		"as incompatible yet (a firewall could refuse the dial, but that is another fault)",
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
			hit := false
			for n := 0; !hit && time.Now().Before(deadline); n++ {
				id := fmt.Sprintf("warm-%s-%s-%d", c.id, s.id, n)
				if err := nd.NewRequest(id, workload.Params(r.target(s), id, true)); err != nil {
					return fmt.Errorf("warming %s to %s: %w", c.id, s.id, err)
				}
				hit = nd.Lookup(id, [16]byte{}) == session.Hit
				nd.RequestFinished(id)
				if err := sleepCtx(ctx, tick); err != nil {
					return err
				}
			}
			if !hit {
				return fmt.Errorf("warming %s to %s: no session within 10 s (see %s and %s)", c.id, s.id, c.logPath, s.logPath)
			}
		}
	}
	return sleepCtx(ctx, warmup/2)
}

func (r *run) loop(ctx context.Context) error {
	next := time.Now()
	lastPoll, lastProgress := time.Now(), time.Now()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		now := r.now()
		if now >= r.sc.Duration {
			r.wl.Step(now)
			return nil
		}
		for len(r.faults) > 0 && r.faults[0].At <= now {
			if err := r.fault(r.faults[0]); err != nil {
				return fmt.Errorf("fault at %v (%s %s): %w", r.faults[0].At, r.faults[0].Kind, r.faults[0].Target, err)
			}
			r.faults = r.faults[1:]
		}
		r.wl.Step(now)
		if time.Since(lastPoll) >= 50*time.Millisecond {
			r.pollSources()
			lastPoll = time.Now()
		}
		if r.opt.Progress != nil && time.Since(lastProgress) >= 5*time.Second {
			n, res := r.wl.Counts()
			fmt.Fprintf(r.opt.Progress, "  %s %s t=%v: %d/%d resolved\n", r.sc.Name, r.policy, now.Truncate(time.Second), res, n)
			lastProgress = time.Now()
		}
		next = next.Add(tick)
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		} else {
			next = time.Now() // running late: no burst to catch up
		}
	}
}

// pollSources steps the engines the workload does not poll (the sources'
// stores end there), and notices sidecars that died.
func (r *run) pollSources() {
	for _, rk := range r.ranks {
		e := rk.eng
		if e == nil || rk.stalled {
			continue
		}
		if e.dead.Load() {
			e.sidecarGone()
			continue
		}
		_, _ = e.step(&pb.StepRequest{})
	}
}

// fault makes one timeline entry happen to every rank it targets.
func (r *run) fault(ft scenario.Fault) error {
	for _, id := range r.sc.Ranks(ft.Target) {
		rk := r.byID[id]
		if rk == nil {
			continue
		}
		hn := rk.hn
		switch ft.Kind {
		case scenario.Crash:
			if err := r.healNet(rk); err != nil { // a dead process holds nothing back
				return err
			}
			r.crash(rk)
		case scenario.Restart:
			if err := r.healNet(rk); err != nil {
				return err
			}
			r.crash(rk)
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
			if err := hn.apply(); err != nil {
				return err
			}
		case scenario.BlackholeData:
			hn.data[rk.port] = true
			if err := hn.apply(); err != nil {
				return err
			}
		case scenario.CloseControl:
			if rk.p != nil {
				if err := resetConns(rk.ns, rk.port); err != nil {
					return err
				}
			}
		case scenario.Slow:
			hn.slow[rk.port] = ft.BytesPerSec
			if err := hn.applySlow(); err != nil {
				return err
			}
		case scenario.Heal:
			if err := r.healNet(rk); err != nil {
				return err
			}
			if rk.stalled {
				if err := rk.p.signal(syscall.SIGCONT); err != nil {
					return err
				}
				rk.stalled = false
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
	return nil
}

// healNet ends the rank's network faults.
func (r *run) healNet(rk *rank) error {
	hn := rk.hn
	_, slow := hn.slow[rk.port]
	if hn.black[rk.port] || hn.data[rk.port] {
		delete(hn.black, rk.port)
		delete(hn.data, rk.port)
		if err := hn.apply(); err != nil {
			return err
		}
	}
	if slow {
		delete(hn.slow, rk.port)
		return hn.applySlow()
	}
	return nil
}

// finish ends the run: every fault healed, what is unresolved is stuck
// and finished; then the engines wait for their chunks to come back (jobs
// done, pins released) for at most drainMax. What a live sidecar still
// holds after that is a leaked slot.
func (r *run) finish(ctx context.Context) int {
	for _, rk := range r.ranks {
		_ = r.healNet(rk)
		if rk.stalled && rk.p != nil {
			_ = rk.p.signal(syscall.SIGCONT)
			rk.stalled = false
		}
	}
	r.wl.Abandon()
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

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
