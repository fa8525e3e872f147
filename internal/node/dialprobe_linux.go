package node

import (
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// dialProbe lets the loop ask the kernel whether a dial's control
// connection has connected, without waiting for the dial goroutine to say
// so (issue 24: starvation blames nobody). The table takes an attempt whose
// connect is not reported within health.Waits.Unanswered (50 ms) for one
// sent into a partition; the report comes from the dial goroutine, and in a
// process starved of CPU that goroutine can run long after the kernel
// connected (a loopback connect measured 64 ms "unanswered" while the
// consumer's process waited for a CPU). The kernel's own view does not wait
// for a goroutine.
//
// It holds a duplicate of the connecting socket's descriptor (taken in the
// dialer's Control hook, before connect(2)), so that the descriptor it polls
// names that socket until done, whatever the net package does with its own.
type dialProbe struct {
	mu sync.Mutex
	fd int  // the duplicate; -1 when there is none (not yet, or done)
	ok bool // done: the connect succeeded
}

func newDialProbe() *dialProbe { return &dialProbe{fd: -1} }

// control is the net.Dialer's Control hook: it runs before connect(2).
// A duplicate that cannot be made leaves the probe empty: the dial
// goroutine's report decides, as it did before the probe.
func (p *dialProbe) control(_, _ string, c syscall.RawConn) error {
	return c.Control(func(fd uintptr) {
		d, err := unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.fd >= 0 {
			unix.Close(p.fd)
		}
		p.fd = d
		p.mu.Unlock()
	})
}

// done releases the duplicate: the dial goroutine calls it as soon as its
// connect returned, ok if it succeeded (the goroutine may be starved again
// before it reports: the probe keeps saying what it learned).
func (p *dialProbe) done(ok bool) {
	p.mu.Lock()
	if p.fd >= 0 {
		unix.Close(p.fd)
		p.fd = -1
	}
	p.ok = ok
	p.mu.Unlock()
}

// connected reports whether the kernel finished the connect: the socket is
// writable and has no error. poll(2) with a zero timeout does not block,
// which is why it may run under the lock.
func (p *dialProbe) connected() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fd < 0 {
		return p.ok
	}
	fds := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLOUT}}
	n, err := unix.Poll(fds, 0)
	bad := int16(unix.POLLERR | unix.POLLHUP | unix.POLLNVAL)
	return err == nil && n == 1 && fds[0].Revents&unix.POLLOUT != 0 && fds[0].Revents&bad == 0
}
