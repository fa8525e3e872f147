package loads

import (
	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// ConnID names one control connection and the session on it.
type ConnID uint64

// ActionKind says what the node must do.
type ActionKind uint8

const (
	// ActDial opens an outbound connection to Peer; report Connected or ConnLost.
	ActDial ActionKind = iota + 1
	// ActSend writes Msg on the control connection.
	ActSend
	// ActData performs Op on the session's data path.
	ActData
	// ActClose closes the control and data connections, then reports
	// DataClosed once no data-path goroutine can touch a slot.
	ActClose
)

// Action is one thing for the node to do, in order.
type Action struct {
	Kind  ActionKind
	Conn  ConnID
	Peer  string       // ActDial
	Msg   wire.Message // ActSend
	Op    session.DataOp
	Cause health.Cause // ActClose
}

// JobKind distinguishes loads from stores in results.
type JobKind uint8

const (
	JobLoad JobKind = iota + 1
	JobStore
)

// JobResult is the one terminal result of a load or store job.
type JobResult struct {
	Job    uint64
	Kind   JobKind
	ReqID  string // the engine's request id
	OK     bool
	Bytes  uint64
	Reason string // why it failed; "" when OK
}
