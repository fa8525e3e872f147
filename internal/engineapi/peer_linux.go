//go:build linux

package engineapi

import (
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// peerPID is the process at the other end of a Unix socket (SO_PEERCRED),
// or 0 when it cannot be read.
func peerPID(c net.Conn) int {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0
	}
	pid := 0
	_ = raw.Control(func(fd uintptr) {
		if cred, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED); err == nil {
			pid = int(cred.Pid)
		}
	})
	return pid
}

// processRunnable reports whether one of pid's threads is running or
// waiting for a CPU (state R in /proc/pid/task/*/stat): a process starved
// of CPU, not a frozen (T) or sleeping one.
func processRunnable(pid int) bool {
	if pid <= 0 {
		return false
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && strings.HasPrefix(s[i+1:], " R") {
			return true
		}
	}
	return false
}
