package main

import (
	"errors"

	"github.com/kvp2p/kvp2p/internal/node"
	"github.com/kvp2p/kvp2p/internal/sidecar"
	"github.com/kvp2p/kvp2p/internal/status"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// prefixes answers GET /v1/prefix from srv's node (a sidecar's exists
// once its engine registered).
func prefixes(srv server, keys []wire.Key) ([]status.PrefixNode, error) {
	var n *node.Node
	switch s := srv.(type) {
	case *node.Node:
		n = s
	case *sidecar.Sidecar:
		n = s.Node()
	}
	if n == nil {
		return nil, errors.New("no node yet: the engine has not registered")
	}
	var out []status.PrefixNode
	for _, f := range n.Manager().Prefixes(keys) {
		out = append(out, status.PrefixNode{Peer: f.Peer, Blocks: f.Blocks, Servable: true})
	}
	return out, nil
}
