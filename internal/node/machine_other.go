//go:build !linux

package node

// physicalMemory is unknown off Linux: the arena is not checked against it.
func physicalMemory() uint64 { return 0 }
