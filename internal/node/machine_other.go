//go:build !linux

package kvp2p

// physicalMemory is unknown off Linux: the arena is not checked against it.
func physicalMemory() uint64 { return 0 }
