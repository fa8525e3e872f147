package datapath

import (
	"net"
	"syscall"
	"time"
)

// tcpUserTimeout is TCP_USER_TIMEOUT from linux/tcp.h; package syscall
// does not name it.
const tcpUserTimeout = 18

// setUserTimeout sets TCP_USER_TIMEOUT: the kernel fails the connection
// when sent data stays unacknowledged for d.
func setUserTimeout(tc *net.TCPConn, d time.Duration) error {
	rc, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	ms := int(min(d.Milliseconds(), 1<<31-1))
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, ms)
	}); err != nil {
		return err
	}
	return serr
}
