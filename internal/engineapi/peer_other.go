//go:build !linux

package engineapi

import "net"

func peerPID(net.Conn) int { return 0 }

func processRunnable(int) bool { return false }

// TreeState is Linux's; elsewhere nothing is known of the engine's processes.
func TreeState(int) (runnable, stopped bool) { return false, false }
