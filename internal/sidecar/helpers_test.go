package sidecar

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/kvp2p/kvp2p/internal/node"
	"github.com/kvp2p/kvp2p/internal/nodetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newProducer is a node without a sidecar, a peer of the sidecars under
// test (nodetest.Start serves it).
func newProducer(peerID string) (*node.Node, error) {
	return node.New(node.Config{PeerID: peerID, BlockBytes: nodetest.BlockBytes, Slots: 64, HashSeed: "s"})
}
