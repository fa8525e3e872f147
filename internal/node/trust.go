package node

import "github.com/kvp2p/kvp2p/internal/identity"

// logTrust says at start what proves a peer's identity here, and what it
// does not (docs/security.md, "Trust model"): the operator sees the choice
// the config made.
func (n *Node) logTrust() {
	switch {
	case n.tls != nil:
		n.log.Info("identity: mutual TLS, one certificate per rank: a peer's certificate must name the peer id it claims",
			"own_rank_uri", identity.RankURI(n.cfg.PeerID))
		if leaf, err := n.tls.OwnCert(); err == nil && !identity.NamesRank(leaf, n.cfg.PeerID) {
			n.log.Error("this node's certificate names no rank "+n.cfg.PeerID+": peers will refuse its Hellos",
				"want_uri_san", identity.RankURI(n.cfg.PeerID), "sans", identity.SANs(leaf))
		}
	case n.cfg.TrustClaimedHost:
		n.log.Warn("identity: plain TCP with trust_claimed_host: a Hello's peer id is taken on its word from any source; " +
			"any process that reaches this port can pose as any peer that has no live session here (docs/security.md)")
	default:
		n.log.Warn("identity: plain TCP: a Hello's peer id must name its source address; any process on a peer's host " +
			"can pose as that peer while it has no live session here. Where ranks share a host, use mutual TLS with " +
			"a certificate per rank (docs/security.md)")
	}
}
