package datapath

import (
	"errors"
	"fmt"
	"runtime/debug"
)

// ErrMemoryFault is the error of a connection whose goroutine faulted on
// its Memory: a shared-memory region (an engine's file mapping) truncated
// under it makes a read or write past the file's end fault (SIGBUS).
var ErrMemoryFault = errors.New("datapath: memory fault (the region was truncated under the mapping?)")

// guardFaults runs f, one of the connection's two goroutines, with memory
// faults turned into an error: the connection fails, and with it the jobs
// on it, instead of the whole process dying. SetPanicOnFault is per
// goroutine and this one only runs f.
func guardFaults(f func() error) (err error) {
	debug.SetPanicOnFault(true)
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if fault, ok := r.(interface{ Addr() uintptr }); ok {
			err = fmt.Errorf("%w: at %#x: %v", ErrMemoryFault, fault.Addr(), r)
			return
		}
		panic(r) // not a fault: a bug, which must not pass for an I/O error
	}()
	return f()
}
