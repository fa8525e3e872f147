//go:build !linux

package node

import (
	"net"
	"time"
)

// tcpQuiet is the Linux kernel's view of a data path (pathquiet_linux.go);
// elsewhere there is none, and the watchdog keeps its own timeout.
func tcpQuiet(net.Conn) (time.Duration, bool) { return 0, false }
