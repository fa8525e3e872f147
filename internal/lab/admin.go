package lab

import (
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"
)

// adminWait bounds how long a serve may take to act on an admin signal.
const adminWait = 3 * time.Second

// admin sends sig to the rank's serve (SIGUSR1: goodbye-idle, SIGUSR2:
// toggle refusing handshakes; see `kvp2p serve --help`) and waits until
// its log has a new line containing want: the signal is asynchronous, and
// the fault must be in place before the next one of the same instant (in
// handshake-fail the refusal comes before the reset that makes the
// consumer redial). A crashed or stopped process can do neither; as in
// the simulator, the fault then does nothing.
func (r *run) admin(rk *rank, sig syscall.Signal, want string) error {
	if rk.p == nil || rk.stalled {
		return nil
	}
	fi, err := os.Stat(rk.logPath)
	if err != nil {
		return err
	}
	from := fi.Size()
	if err := rk.p.signal(sig); err != nil {
		return fmt.Errorf("%s to %s: %w", sig, rk.id, err)
	}
	deadline := time.Now().Add(adminWait)
	for {
		if seen, err := logSince(rk.logPath, from, want); err != nil || seen {
			return err
		}
		if rk.p.exited() {
			return fmt.Errorf("%s to %s: the process exited (see %s)", sig, rk.id, rk.logPath)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s to %s: no %q in its log within %v (see %s)", sig, rk.id, want, adminWait, rk.logPath)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// logSince reports whether the file has want in what was written after
// offset from.
func logSince(path string, from int64, want string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, from, 1<<20))
	if err != nil {
		return false, err
	}
	return strings.Contains(string(b), want), nil
}
