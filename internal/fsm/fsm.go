package fsm

import (
	"fmt"
	"log/slog"
	"testing"
)

// Illegal reports a move from -> to that the machine named what does not
// allow. In a test binary it panics, so that any test driving the machine
// into an impossible state fails where it happened; in production it logs
// at Error and the caller carries on with the move (a logged oddity is
// better than a node that stops serving).
func Illegal(log *slog.Logger, what string, from, to fmt.Stringer) {
	msg := fmt.Sprintf("%s: illegal transition %s -> %s", what, from, to)
	if testing.Testing() {
		panic(msg)
	}
	if log != nil {
		log.Error(msg)
	}
}
