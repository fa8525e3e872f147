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

// maxTree bounds the processes TreeState reads (an engine and its workers).
const maxTree = 64

// TreeState reports, for pid and its descendants (an engine process and
// the workers it started), whether a thread of one is running or waiting
// for a CPU (state R: starved, not stuck) and whether one of them is
// stopped (every thread in state T or t: SIGSTOP, a debugger). Both false
// when pid is 0 or gone.
func TreeState(pid int) (runnable, stopped bool) {
	todo, seen := []int{pid}, 0
	for len(todo) > 0 && seen < maxTree {
		p := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if p <= 0 {
			continue
		}
		seen++
		dir := "/proc/" + strconv.Itoa(p) + "/task"
		tasks, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		all := len(tasks) > 0
		for _, t := range tasks {
			b, err := os.ReadFile(dir + "/" + t.Name() + "/stat")
			if err != nil {
				all = false
				continue
			}
			s := string(b)
			i := strings.LastIndexByte(s, ')')
			if i < 0 || len(s) < i+3 {
				all = false
				continue
			}
			switch s[i+2] {
			case 'R':
				runnable = true
				all = false
			case 'T', 't':
			default:
				all = false
			}
			if kids, err := os.ReadFile(dir + "/" + t.Name() + "/children"); err == nil {
				for _, f := range strings.Fields(string(kids)) {
					if c, err := strconv.Atoi(f); err == nil {
						todo = append(todo, c)
					}
				}
			}
		}
		stopped = stopped || all
	}
	return runnable, stopped
}
