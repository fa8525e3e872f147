//go:build linux

package engineapi

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// TestTreeState: an engine's process tree is read with its workers. This
// test's process, spinning on a thread, is runnable; a child of it stopped
// by SIGSTOP makes the tree's state stopped too, and the child alone is
// stopped and not runnable. No pid, or one that does not exist: nothing.
func TestTreeState(t *testing.T) {
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Skipf("no sleep to start: %v", err)
	}
	defer func() {
		_ = child.Process.Kill()
		_ = child.Wait()
	}()
	pid := child.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, syscall.WUNTRACED, nil); err != nil || !ws.Stopped() {
		t.Fatalf("child not stopped: %v %v", ws, err)
	}
	defer func() { _ = syscall.Kill(pid, syscall.SIGCONT) }()
	if r, s := TreeState(pid); r || !s {
		t.Errorf("a stopped child: runnable %v, stopped %v; want stopped only", r, s)
	}

	stop := spin()
	r, s := TreeState(os.Getpid())
	stop()
	if !r || !s {
		t.Errorf("this process (spinning) with its stopped child: runnable %v, stopped %v; want both", r, s)
	}
	if r, s := TreeState(0); r || s {
		t.Error("pid 0: runnable or stopped")
	}
	if r, s := TreeState(1 << 30); r || s {
		t.Error("no such process: runnable or stopped")
	}
}
