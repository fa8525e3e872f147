package main

import (
	"log/slog"
	"os"
	"syscall"
)

// admin is the node's part that the signals drive.
type admin interface {
	GoodbyeIdle() (int, error)
	RefuseHandshakes(on bool) error
}

// adminSignal performs an operator's signal on node and returns whether
// the node now refuses handshakes. A signal is the admin channel because
// only the node's own user (or root) can send one: nothing listens on the
// network for it, and the fault lab already holds every node's pid.
//
//	SIGUSR1  every live session ends now with Goodbye(idle), as the idle
//	         eviction would: peers reconnect on their next request.
//	SIGUSR2  toggles refusing new handshakes: while on, every new peer is
//	         answered Goodbye(incompatible); sessions already up stay.
//
// Each logs one line at warn level saying what it did (warn: an operator
// changed what the node does, and the lab's serves log warn and above). The kernel merges a signal sent
// again before the first was taken, so a script toggling SIGUSR2 waits for
// the "handshakes" line before sending the next.
func adminSignal(node admin, sig os.Signal, refusing bool, log *slog.Logger) bool {
	switch sig {
	case syscall.SIGUSR1:
		n, err := node.GoodbyeIdle()
		if err != nil {
			log.Error("SIGUSR1: goodbye-idle failed", "err", err)
			return refusing
		}
		log.Warn("SIGUSR1: said goodbye (idle) to every session", "sessions", n)
	case syscall.SIGUSR2:
		if err := node.RefuseHandshakes(!refusing); err != nil {
			log.Error("SIGUSR2: refuse-handshakes failed", "err", err)
			return refusing
		}
		refusing = !refusing
		log.Warn("SIGUSR2: handshakes", "refused", refusing)
	}
	return refusing
}
