package node

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// tcpQuiet is how long nc's path can be silent while its peer lives, from
// the kernel's figures for nc's socket (TCP_INFO): TCP's retransmission
// timeout as its round-trip estimates set it (srtt plus four times its
// variation, at least the 200 ms floor), plus a round trip for the resent
// bytes to arrive. Not the kernel's current timeout (tcpi_rto): that one
// doubles with every unanswered retransmission, and on a blackholed path
// it would stretch the watchdog that is to catch it. ok is false if nc is
// no TCP socket the node can reach.
func tcpQuiet(nc net.Conn) (d time.Duration, ok bool) {
	sc := rawConn(nc)
	if sc == nil {
		return 0, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var info *unix.TCPInfo
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		info, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || gerr != nil {
		return 0, false
	}
	srtt, rttvar := time.Duration(info.Rtt)*time.Microsecond, time.Duration(info.Rttvar)*time.Microsecond
	return 2*srtt + max(4*rttvar, 200*time.Millisecond), true
}
