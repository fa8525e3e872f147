// Package fsm is what kvp2p's state machines share: the report of an
// illegal transition. Each machine (session phases, the table's conns and
// jobs, the node's control connections) writes its legal moves in one
// function next to its state type and calls Illegal for any other move.
package fsm
