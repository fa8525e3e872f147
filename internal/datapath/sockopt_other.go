//go:build !linux

package datapath

import (
	"net"
	"time"
)

// setUserTimeout is a no-op where TCP_USER_TIMEOUT does not exist; the read
// timeout and keepalives still detect a dead peer.
func setUserTimeout(*net.TCPConn, time.Duration) error { return nil }
