package node

import (
	"net"
	"syscall"
	"time"
)

// pathQuietEvery: how often the loop asks the kernel about the data paths
// that owe bytes (a system call each).
const pathQuietEvery = 100 * time.Millisecond

// checkPaths tells the table, for each session whose data path owes
// bytes, the longest silence that path can show while its peer is alive,
// as this node's kernel measures the path (tcpQuiet: TCP's retransmission
// timeout from its round-trip estimates, plus a round trip; issue 24: slow
// is not dead). Behind a slow link whose queue holds a second of data the
// round trip is a second too; a segment lost there is sent again only
// after the retransmission timeout and arrives a round trip later, and the
// session's data path is silent all that time while the peer is alive and
// delivering (measured in the lab: 1.005 s of silence on a 1 MiB/s rank,
// and the watchdog closed it). On a fast path the figure is a few hundred
// milliseconds, under the watchdog's own timeout, and changes nothing.
// A path that was slow and then goes dark keeps its last round trip (no
// new samples come): its watchdog stays that wide, at most the heartbeat
// timeout.
func (n *Node) checkPaths(now time.Time) {
	if now.Sub(n.pathsAt) < pathQuietEvery {
		return
	}
	n.pathsAt = now
	for id, c := range n.conns {
		if c.dataNC == nil || c.closing() || !n.tb.DataOwed(now, id) {
			continue
		}
		if d, ok := tcpQuiet(c.dataNC); ok {
			// At most the heartbeat timeout, the data connection's own
			// read timeout: past it the connection ends anyway.
			n.tb.PathQuiet(now, id, min(d, n.timers.HeartbeatTimeout))
		}
	}
}

// rawConn finds the socket under nc's wrappers (TLS, the coalescer, a
// test's): nil if there is none to ask.
func rawConn(nc net.Conn) syscall.Conn {
	for range 4 {
		switch c := nc.(type) {
		case syscall.Conn:
			return c
		case interface{ NetConn() net.Conn }:
			nc = c.NetConn()
		default:
			return nil
		}
	}
	return nil
}
