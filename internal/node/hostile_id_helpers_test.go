package node

import (
	cryptorand "crypto/rand"

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
