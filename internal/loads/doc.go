// Package loads is the sans-I/O core behind kvp2p's Manager: the scheduler
// calls (new request, lookup, submit load, submit store, request finished,
// poll finished, shutdown), the sessions to peers, the failed-ids set, the
// unbound stores of PD producers, slot reservations in the block store, and
// the reap that turns a session's end into failed loads through the failure
// policy.
//
// Contract. A Table is owned by one goroutine and never does I/O or reads
// the clock: every call takes `now`. Every entry point (the scheduler calls,
// the node's reports, Tick, Shutdown) ends in settle (settle.go), which runs
// its consequences to a fixed point; the table's one outbox is then
// TakeEffects. The node performs the Actions it holds (dial, send, close,
// data-path operations) in order, hands the Results to the engine, and
// feeds back what happened (connected, received, lost, data events,
// DataClosed).
// Within one batch of actions the data-path operations of a session come
// before its messages. After a Close action the node must eventually call
// DataClosed for that connection exactly once, when none of its data-path
// goroutines can touch a slot: failed loads' destination slots and the
// producer's pins are freed only then.
//
// States. A conn's connections (connState: live, lingering, closed, gone),
// what the policy heard of it (reportState: unreported, up, reaped) and a
// job's life (jobState: running, parked, holding, done) each have their
// legal moves written in one function (conn_state.go, job_state.go); an
// illegal move panics in tests and is logged in production (internal/fsm).
//
// Timers. Tick visits only the sessions with a timer due: each session
// reports its next deadline (session.NextDeadline) and the table keeps
// them in heaps (deadlines.go), so an idle session costs nothing per tick
// while the visits, and their order, are those of a scan of every session.
// NextDeadline is the earliest instant at which Tick has anything to do
// (those heaps, the policy's timers, parked stores' timeout, a shutdown):
// a Tick before it is a no-op, so an owner may skip it, as the simulator
// does for its idle nodes. For that, a reaped id's retention is checked by
// its age where it is used, not left to the once-a-second pruning.
//
// Per message. In a large fleet a heartbeat's cost is the cache lines it
// touches: an owner that delivers many messages per connection may keep
// its ConnRef (Ref) and call ReceiveRef, which skips Receive's lookup by
// id, and the conn's and session's hot fields come first in their structs.
package loads
