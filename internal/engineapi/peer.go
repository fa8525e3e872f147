package engineapi

import "net"

// pidListener gives each connection it accepts a RemoteAddr that names
// the process at the other end (pidAddr), so that the Attach stream can
// tell an engine starved of CPU from a hung one (Server.starvedGrace).
type pidListener struct{ net.Listener }

func (l pidListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if pid := peerPID(c); pid > 0 {
		ra := c.RemoteAddr()
		if ra == nil { // an unnamed client socket
			ra = &net.UnixAddr{Net: "unix"}
		}
		return pidConn{c, pidAddr{ra, pid}}, nil
	}
	return c, nil
}

type pidConn struct {
	net.Conn
	addr pidAddr
}

func (c pidConn) RemoteAddr() net.Addr { return c.addr }

// pidAddr is a Unix peer's address with its process id.
type pidAddr struct {
	net.Addr
	pid int
}

// pidOf returns the process id an address carries, or 0.
func pidOf(a net.Addr) int {
	if p, ok := a.(pidAddr); ok {
		return p.pid
	}
	return 0
}

// SetUnlinkOnClose is net.UnixListener's, for a Unix listener underneath.
func (l pidListener) SetUnlinkOnClose(unlink bool) {
	if ul, ok := l.Listener.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(unlink)
	}
}

// PeerPID is the process id of the engine whose outbox out is (the
// process at the other end of its Attach stream on a Unix socket), or 0
// when unknown (TCP, another platform).
func PeerPID(out Outbox) int {
	if p, ok := out.(pidOutbox); ok {
		return p.pid
	}
	return 0
}

// pidOutbox is an engine's outbox that knows the engine's process.
type pidOutbox struct {
	Outbox
	pid int
}
