package node

import (
	"net"

	"github.com/kvp2p/kvp2p/internal/wire"
)

// Frame bounds (issue 25, attack 4: 120 sessions each announcing a 4 MiB
// control frame and sending all of it but the last 64 bytes took the
// process from 17 to 513 MB, which stayed).
//
//   - A control connection accepts frames up to wire.ControlFrameLimit of
//     the limits it decodes with: the largest legitimate control frame, a
//     Fetch of MaxKeys keys (1,314,846 bytes by default), not 4 MiB. A data
//     connection's frames (payloads aside) are at most DataFrameLimit
//     (4,168 bytes); the first frame of an accepted connection, 4 KiB.
//   - A reader's buffer grows as a frame's bytes arrive, not from its
//     header: an announced frame costs what was sent of it (at most twice
//     that, by doubling).
//   - Past the 64 KiB a reader keeps for streaming, buffers are charged to
//     the node's frame budget (limits.max_frame_memory, 16 MiB), given back
//     as soon as the frame is decoded or the connection ends. A frame
//     over what the budget has left ends its session.
//
// So control readers hold at most sessions x 64 KiB (plus 256 bytes each
// while idle) + max_frame_memory, whatever peers announce.

func controlLimits() wire.Limits {
	l := wire.DefaultLimits()
	l.MaxFrame = wire.ControlFrameLimit(l)
	return l
}

func dataLimits() wire.Limits {
	l := wire.DefaultLimits()
	l.MaxFrame = wire.DataFrameLimit(l)
	return l
}

// ctlReader is the Reader of a control connection we dialed.
func (n *Node) ctlReader(nc net.Conn) *wire.Reader {
	rd := wire.NewReader(nc, n.lim)
	rd.SetBudget(n.frameMem)
	return rd
}

// sessionLimits sets the limits of an accepted connection's reader once
// its first frame said what it is: a Hello's (control) or a DataAttach's.
func (n *Node) sessionLimits(rd *wire.Reader, first wire.Message) {
	if _, data := first.(*wire.DataAttach); data {
		rd.SetLimits(n.dataLim)
		return
	}
	rd.SetLimits(n.lim)
	rd.SetBudget(n.frameMem)
}
