//go:build !linux

package node

import "syscall"

// dialProbe is the Linux kernel's view of a connecting socket
// (dialprobe_linux.go); elsewhere there is none, and the dial goroutine's
// report decides alone.
type dialProbe struct{}

func newDialProbe() *dialProbe                                    { return &dialProbe{} }
func (p *dialProbe) control(_, _ string, _ syscall.RawConn) error { return nil }
func (p *dialProbe) done(bool)                                    {}
func (p *dialProbe) connected() bool                              { return false }
