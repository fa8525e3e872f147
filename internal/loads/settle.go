package loads

import (
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
)

// Effects is everything the table decided for its owner since the last
// TakeEffects: what the node must do, and the jobs' results for the engine.
type Effects struct {
	Actions []Action    // in order: dials, sends, data-path operations, closes
	Results []JobResult // in order; each job's one terminal result (get_finished_jobs)
}

// Empty reports whether there is nothing to act on.
func (e Effects) Empty() bool { return len(e.Actions) == 0 && len(e.Results) == 0 }

// TakeEffects returns the effects decided since the last call. It is the
// table's one outbox: every entry point has settled (see settle) before it
// returns, so what is here is complete.
func (t *Table) TakeEffects() Effects {
	e := Effects{Actions: t.actions, Results: t.results}
	t.actions, t.results = nil, nil
	return e
}

// ReuseActions hands back the Actions of an Effects its owner has
// performed: the table appends the next ones into that array rather than
// a new one (one allocation per message otherwise, on the simulator's hot
// path). The owner must not touch them afterwards.
func (t *Table) ReuseActions(acts []Action) {
	if t.actions == nil {
		clear(acts) // messages and ops: nothing kept alive by a spare slot
		t.actions = acts[:0]
	}
}

// touch says c's session may have output for settle to collect. Entry
// points touch the sessions they called and then settle; nothing else
// collects a session's output.
func (t *Table) touch(c *conn) {
	t.markDirty(c)
	if !c.touched {
		c.touched = true
		t.touched = append(t.touched, c)
	}
}

// settle is where every entry point ends: it runs the consequences of what
// the entry point did to a fixed point, in this order of precedence:
//
//  1. collect the output of every touched session (collect), in the order
//     they were touched: actions, results, bindings, and the sessions that
//     ended;
//  2. if the policy has something to say (askPolicy), run its timers if a
//     tick is due and apply its decisions, which touch sessions again;
//  3. reap one ended session (reapOne): the policy hears of it, names
//     siblings to close with it, and is asked again.
//
// It repeats until no session is touched, the policy was asked and the
// reap queue is empty. No step calls another: each only touches sessions
// or queues ends, so nothing re-enters.
//
// The policy is asked when it may have decided something the table must
// carry out: after its Tick, after a probe answer, after a lookup it held
// (GateWait) and after every reap. A probe it decides when a session comes
// up (SessionUp) waits for the next of these, as it always did: asking at
// every settle sends such probes up to a tick earlier and changes the
// simulator's results (see docs/architecture.md).
func (t *Table) settle(now time.Time) {
	for {
		switch {
		case t.touchedAt < len(t.touched):
			c := t.touched[t.touchedAt]
			t.touched[t.touchedAt] = nil
			t.touchedAt++
			c.touched = false
			t.collect(now, c)
		case t.askPolicy || t.policyTick:
			t.askPolicy = false
			if t.policyTick {
				t.policyTick = false
				t.policy.Tick(now)
			}
			t.decide(now)
		case len(t.ended) > 0:
			c := t.ended[0]
			t.ended[0] = nil
			t.ended = t.ended[1:]
			t.reapOne(now, c)
		default:
			t.touched = t.touched[:0]
			t.touchedAt = 0
			if len(t.ended) == 0 {
				t.ended = nil
			}
			return
		}
	}
}

// collect turns what a session decided into actions, results and slot
// work, and ends a lingering session whose time is up.
func (t *Table) collect(now time.Time, c *conn) {
	t.markDirty(c)
	t.checkHold(now, c)
	for {
		t.collectOut(now, c)
		if !t.closeIfDone(now, c) {
			return
		}
	}
}

func (t *Table) collectOut(now time.Time, c *conn) {
	if c.rep == reportedUp && c.s.OutEmpty() {
		return // the common case on a tick: nothing decided
	}
	for {
		if c.rep == unreported && c.s.Ready() && !c.rejected && c.holdFor == nil {
			// Checked before anything else: becoming ready may decide nothing.
			t.report(c, reportedUp)
			t.policy.SessionUp(now, t.peerOf(c))
		}
		o := c.s.TakeOut()
		if o.Empty() {
			return
		}
		for _, op := range o.Data {
			if c.st < connClosed {
				t.actions = append(t.actions, Action{Kind: ActData, Conn: c.id, Op: op})
			}
		}
		for _, m := range o.Msgs {
			if c.st < connClosed {
				t.actions = append(t.actions, Action{Kind: ActSend, Conn: c.id, Msg: m})
			}
		}
		for _, r := range o.Loads {
			t.loadDone(now, c, r)
		}
		for _, r := range o.Stores {
			t.storeDone(r)
		}
		for _, j := range o.Releases {
			t.release(j)
		}
		for _, id := range o.NewFetch {
			t.bind(now, c, id)
		}
		if o.Ended != health.CauseNone && c.st == connLive {
			if c.heldBy != nil {
				t.touch(c.heldBy) // it is proven dead: the newcomer replaces it
			}
			if c.rep != reaped { // a sibling closed by a reap was reaped with it
				t.ended = append(t.ended, c)
			}
			if c.s.Lingering() {
				// The peer said goodbye after sending: let its last bytes land.
				c.linger = now.Add(lingerFor)
				t.move(c, connLingering)
			} else {
				t.move(c, connClosed)
				t.actions = append(t.actions, Action{Kind: ActClose, Conn: c.id, Cause: o.Ended})
			}
		}
	}
}

// closeIfDone closes a lingering session once its last loads finished or
// its linger time ran out; true if it did (StopLinger may have failed
// loads: collect again).
func (t *Table) closeIfDone(now time.Time, c *conn) bool {
	if c.st != connLingering || (c.s.Lingering() && now.Before(c.linger)) {
		return false
	}
	c.s.StopLinger(now)
	t.move(c, connClosed)
	t.actions = append(t.actions, Action{Kind: ActClose, Conn: c.id, Cause: c.s.Ended()})
	return true
}
