package loads

import (
	"fmt"

	"github.com/kvp2p/kvp2p/internal/fsm"
)

// A conn has two small state machines, each with its moves written in one
// function: what the node was told of its connections (connState), and
// what the policy heard of its session (reportState).
//
//	connState      event                                   next
//	connLive       its session ended (collect)             connClosed, or connLingering if
//	                                                       the peer said goodbye after sending
//	connLingering  last load landed or linger ran out      connClosed
//	               (closeIfDone), or its data path closed
//	               (DataClosed)
//	connClosed     DataClosed                              connGone
//
//	reportState    event                                   next
//	unreported     session ready (collect: SessionUp)      reportedUp
//	unreported,    reaped (reapOne: SessionEnded, or        reaped
//	reportedUp     collateral of a sibling's reap)
type connState uint8

const (
	connLive      connState = iota // its session may still run
	connLingering                  // ended in order; its data connection delivers the last loads
	connClosed                     // ActClose emitted; DataClosed still to come
	connGone                       // DataClosed: out of the table
)

var connStateNames = [...]string{"live", "lingering", "closed", "gone"}

func (s connState) String() string {
	if int(s) < len(connStateNames) {
		return connStateNames[s]
	}
	return fmt.Sprintf("connState(%d)", s)
}

func legalConnMove(from, to connState) bool {
	switch from {
	case connLive:
		return to == connLingering || to == connClosed
	case connLingering:
		return to == connClosed
	case connClosed:
		return to == connGone
	}
	return false
}

// move changes c's connState; an illegal move is reported (fsm.Illegal).
func (t *Table) move(c *conn, to connState) {
	if !legalConnMove(c.st, to) {
		fsm.Illegal(t.log, fmt.Sprintf("loads: conn %d (peer %q)", c.id, c.peer), c.st, to)
	}
	c.st = to
}

type reportState uint8

const (
	unreported reportState = iota // the policy has not heard of it (not ready yet, or never)
	reportedUp                    // SessionUp told
	reaped                        // its end was handled; nothing more is reported
)

var reportStateNames = [...]string{"unreported", "up", "reaped"}

func (s reportState) String() string {
	if int(s) < len(reportStateNames) {
		return reportStateNames[s]
	}
	return fmt.Sprintf("reportState(%d)", s)
}

func legalReport(from, to reportState) bool {
	switch from {
	case unreported:
		return to == reportedUp || to == reaped
	case reportedUp:
		return to == reaped
	}
	return false
}

// report changes c's reportState; an illegal move is reported.
func (t *Table) report(c *conn, to reportState) {
	if !legalReport(c.rep, to) {
		fsm.Illegal(t.log, fmt.Sprintf("loads: conn %d (peer %q) report", c.id, c.peer), c.rep, to)
	}
	if to == reaped && c.rep != reaped && !c.rejected && c.st != connGone {
		t.nLive-- // no longer counts against the cap (liveCount)
	}
	c.rep = to
}

// endedBy says why the table ended a session itself, for the policy.
type endedBy uint8

const (
	endedByFault   endedBy = iota // the session's own end (or not ended by the table)
	endedByRestart                // the peer came back as a new incarnation
	endedByPolicy                 // the policy closed it (an unanswered probe)
)
