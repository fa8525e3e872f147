package wire

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// tcpReadv is readv(2) on a TCP socket through its RawConn, so the runtime
// poller waits for data and read deadlines apply as to Read.
type tcpReadv struct {
	rc  syscall.RawConn
	fn  func(fd uintptr) bool // once, bound here so that a read allocates nothing
	iov [1 + 2*MaxAhead]syscall.Iovec
	niv int
	n   int
	err syscall.Errno
}

// newVReader returns a vreader for a *net.TCPConn, else nil.
func newVReader(r io.Reader) vreader {
	tc, ok := r.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	v := &tcpReadv{rc: rc}
	v.fn = v.once
	return v
}

// once is one readv; false asks the poller to wait for data.
func (v *tcpReadv) once(fd uintptr) bool {
	for {
		n, _, e := syscall.Syscall(syscall.SYS_READV, fd, uintptr(unsafe.Pointer(&v.iov[0])), uintptr(v.niv))
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		v.n, v.err = int(n), e
		return true
	}
}

func (v *tcpReadv) readv(bufs [][]byte) (int, error) {
	v.niv = 0
	for _, b := range bufs[:min(len(bufs), len(v.iov))] {
		if len(b) == 0 {
			break
		}
		v.iov[v.niv].Base = &b[0]
		v.iov[v.niv].SetLen(len(b))
		v.niv++
	}
	if v.niv == 0 {
		return 0, errBadCount
	}
	v.n, v.err = 0, 0
	err := v.rc.Read(v.fn)
	clear(v.iov[:v.niv]) // keep no slot reachable
	switch {
	case err != nil:
		return 0, err
	case v.err != 0:
		return 0, os.NewSyscallError("readv", v.err)
	case v.n == 0:
		return 0, io.EOF
	}
	return v.n, nil
}
