package datapath

import (
	"net"
	"syscall"
	"testing"
	"time"
)

func TestUserTimeout(t *testing.T) {
	na, nb := tcpPair(t)
	defer nb.Close()
	a := startPeer(t, na, Config{BlockBytes: 64, UserTimeout: 1500 * time.Millisecond}, 1)
	defer a.stop(t)
	rc, err := na.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got int
	var gerr error
	rc.Control(func(fd uintptr) { got, gerr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout) })
	if gerr != nil || got != 1500 {
		t.Fatalf("TCP_USER_TIMEOUT = %d (%v), want 1500", got, gerr)
	}
}
