package node

import (
	cryptorand "crypto/rand"
	"net"
	"testing"

	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// halves returns a dialer's two first frames for claim: a Hello with a
// fresh attach secret and the DataAttach whose MAC proves it, as Node.dial
// and stampAttempt make them. Tests that speak the protocol by hand use
// it so that their halves pair (or, edited, so that they do not).
func halves(claim string, inc, attempt uint64) (*wire.Hello, *wire.DataAttach) {
	h := &wire.Hello{Version: wire.Version, PeerID: claim, Incarnation: inc, BlockBytes: nodetest.BlockBytes,
		HashSeed: "s", MaxInflight: 64, MaxFrame: 4 << 20, Attempt: attempt}
	cryptorand.Read(h.Secret[:])
	return h, &wire.DataAttach{PeerID: claim, Incarnation: inc, Attempt: attempt,
		MAC: wire.AttachMAC(h.Secret, claim, inc, attempt)}
}

// needAddr skips t where the loopback address ip cannot be bound: the
// attacks from other hosts need 127.0.0.2 and up.
func needAddr(t *testing.T, ip string) {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Skipf("no loopback address %s here: %v", ip, err)
	}
	ln.Close()
}
