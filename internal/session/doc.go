// Package session holds the per-peer state machine of kvp2p: one Session per
// peer, carrying both roles at once (consumer loads and lookups, producer
// serving), the handshake, heartbeats and every per-peer timer.
//
// Contract. A Session is sans-I/O and single-owner: it never touches a socket
// and never reads the clock. The owner feeds it events (Receive, Tick, the
// data-path events, calls from the manager) with the current time, then
// collects what it decided with TakeOut: control messages to send in order,
// data-path operations, load and store results, slot releases. The owner
// must perform the data-path operations before it sends the control
// messages of the same batch (an Expect must be registered before the Fetch
// that causes data to flow).
//
// Lifecycle (the phases and their one transition function, legalMove, are
// in session.go): New (connecting; handshaking for an inbound session) ->
// Start (connection up, Hello sent: handshaking) -> ready (peer's Hello
// accepted and our Hello acknowledged) -> ended, with exactly one
// health.Cause -> closed (DataClosed). An illegal move panics in tests and
// is logged in production (internal/fsm). After the end the owner closes the connections and
// reports DataClosed once no data-path goroutine can touch a slot any more;
// only then are failed loads' destination slots released and the producer's
// pins dropped. Failures are published at once; slots wait for proof: the
// producer stopped (TransferDone or AbortAck) and the reader saw the job's
// terminal frame, or DataClosed. A failed load without that proof
// AbortAckTimeout after its failure ends the session (protocol-error if no
// ack came, progress-stall if the data path never ended), so that slots
// are never held for the life of a session; a load whose producer acked
// but whose terminal frame still waits behind bytes on a data connection
// that delivers is waited for, bounded by StallTimeout of silence.
//
// Slow (slow.go): a load whose bytes arrive too slowly to finish within its
// load timeout is failed at once, deliberately (ReasonSlow), and the
// session is reported Slow; the session stays, and nothing is a fault.
//
// Guarantees: exactly one LoadResult per load; a failed load's bytes are
// never reported as loaded; a round number is never reused for a request id
// on a session; a load is never queued behind an unfinished handshake (the
// caller checks Ready and RequestBlocks refuses otherwise).
package session
