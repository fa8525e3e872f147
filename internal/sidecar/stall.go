package sidecar

import (
	"time"

	pb "github.com/kvp2p/kvp2p/internal/engineapi/enginepb"
	"github.com/kvp2p/kvp2p/internal/node"
)

// An engine whose steps stopped (its worker hung or frozen) while its
// process, its stream to the sidecar and the sidecar live: a peer's
// lookup then answers MISS at engine.serve_timeout (its ask goes
// unanswered), but a PD decoder's fetch waits for stores the engine will
// not make, and before this it waited for its PD load timeout (30 s, seen
// with real engines). The sidecar cannot tell from the stream: the engine's
// client answers pings from a thread of its own, and a step with nothing
// to say is not sent. So while peers' PD fetches wait here, it probes: an
// ask with no keys, which the engine answers (an empty grant) at its next
// scheduler step. A probe unanswered for engine.step_timeout, while the
// engine has requests in flight, means its steps stopped: the waiting
// fetches fail (loads.Table.ProducerStalled) and their decoders fall back.
//
// Only with requests in flight: an idle vLLM 0.32 engine does not step
// at all (its core waits for work), and a decoder-first fetch waits for a
// prefill the router has yet to send it; that wait is the PD load
// timeout's. An engine frozen while idle looks the same and is not caught.
//
// Slow is not stopped: an engine whose processes wait for a CPU (a thread
// in state R, none stopped: every core busy, its steps taking seconds)
// answers the probe late, and failing its peers' fetches then is a false
// fallback (seen with real engines under busy cores: a probe answered
// 2.9 s after it was sent). Such an engine is given up to starvedGrace
// more step_timeouts, as the engine stream gives a starved engine more
// EngineTimeouts (engineapi); a stopped process (SIGSTOP of the engine or
// of its worker) or one not runnable (hung) gets none.

// starvedGrace is how many more step_timeouts a starved engine's probe
// may go unanswered: four in all, as the engine stream allows.
const starvedGrace = 3

// stallProbe is the sidecar's probe of its engine's steps.
type stallProbe struct {
	id      uint64    // the probe's ask id; 0: none out
	at      time.Time // when it was sent, or when the engine last had no request in flight
	stalled bool      // the last probe went unanswered past step_timeout
	grace   int       // step_timeouts added because the engine was starved, not stopped
}

// probeVerdict judges a probe unanswered for waited: still within its
// step_timeouts (timeout, plus one per grace already given), it waits
// (false, grace); past them, an engine whose processes are runnable and
// none stopped (tree: starved of CPU) gets one more while grace is below
// starvedGrace (false, grace+1); otherwise its steps are taken for
// stopped (true, grace). tree is read only when a timeout has run out.
// A peer's ask is judged the same way, timeout its serve_timeout (asks.go).
func probeVerdict(waited, timeout time.Duration, grace int, tree func() (runnable, stopped bool)) (bool, int) {
	if waited < timeout*time.Duration(1+grace) {
		return false, grace
	}
	if grace < starvedGrace {
		if runnable, stopped := tree(); runnable && !stopped {
			return false, grace + 1
		}
	}
	return true, grace
}

// watchSteps runs at every tick: it sends a probe while peers' PD fetches
// wait and none is out, and fails those fetches once a probe has gone
// unanswered for step_timeout with requests in flight.
func (e *engine) watchSteps(n *node.Node, now time.Time, tree func() (runnable, stopped bool)) {
	if e.reg == 0 {
		return
	}
	waits := n.Table().ProducerWaits()
	if e.probe.id == 0 {
		if waits > 0 {
			e.nextAsk++
			e.probe = stallProbe{id: e.nextAsk, at: now}
			e.post(&pb.SidecarMessage{Msg: &pb.SidecarMessage_Ask{Ask: &pb.ServeAsk{AskId: e.probe.id}}})
		}
		return
	}
	if len(e.reqs) == 0 {
		// Idle: no step is due. Its clock starts when the engine has work
		// (a probe out since the engine was idle would otherwise expire at
		// the tick after the step that registered its first request,
		// before that step's answer to it arrives).
		e.probe.at, e.probe.grace = now, 0
		return
	}
	if waits == 0 {
		return
	}
	if !e.probe.stalled {
		stop, grace := probeVerdict(now.Sub(e.probe.at), e.cfg.StepTimeout, e.probe.grace, tree)
		if grace > e.probe.grace && e.probe.grace == 0 {
			n.Log().Info("the engine has not stepped within engine.step_timeout but its processes wait for a CPU (starved, not stopped): waiting on",
				"waited", now.Sub(e.probe.at), "requests", len(e.reqs), "up_to", e.cfg.StepTimeout*(1+starvedGrace))
		}
		e.probe.grace = grace
		if !stop {
			return
		}
		n.Log().Warn("the engine has not stepped within engine.step_timeout with requests in flight: failing peers' PD fetches",
			"waited", now.Sub(e.probe.at), "requests", len(e.reqs), "starved_grace", e.probe.grace)
		e.probe.stalled = true
	}
	n.Table().ProducerStalled(now) // and each fetch that comes while it stays stopped
}

// probeAnswered reports whether g answers the probe; the engine stepped.
func (e *engine) probeAnswered(n *node.Node, now time.Time, g *pb.ServeGrant) bool {
	if e.probe.id == 0 || g.AskId != e.probe.id {
		return false
	}
	if e.probe.stalled {
		n.Log().Info("the engine steps again", "after", now.Sub(e.probe.at))
	}
	e.probe = stallProbe{}
	if g.PinId != 0 { // a probe names no key: nothing to pin, give it back
		e.post(&pb.SidecarMessage{Msg: &pb.SidecarMessage_Release{Release: &pb.ServeRelease{PinIds: []uint64{g.PinId}}}})
	}
	return true
}
