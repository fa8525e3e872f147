package node

import "github.com/kvp2p/kvp2p/internal/metrics"

// Refused returns the node's refusal counts (kvp2p_connections_refused_total)
// for tests.
func (n *Node) Refused() metrics.Refusals { return n.connsRefused() }
