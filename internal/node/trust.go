package node

import (
	"net"
	"slices"
	"strings"

	"github.com/kvp2p/kvp2p/internal/identity"
)

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

// Identity modes, as the status snapshot names them.
const (
	identityTLS          = "mtls"
	identityPlain        = "plain-tcp"
	identityTrustClaimed = "plain-tcp-trust-claimed-host"
)

func (n *Node) identityMode() string {
	switch {
	case n.tls != nil:
		return identityTLS
	case n.cfg.TrustClaimedHost:
		return identityTrustClaimed
	}
	return identityPlain
}

// sameHostExposure is what a process on a host with several ranks can do
// here, and how to close it, for the identity mode; empty if nothing: under
// mTLS, or on plain TCP with no host holding two ranks in view.
func sameHostExposure(mode string, shared []string) string {
	switch {
	case mode == identityTrustClaimed:
		return "plain TCP with trust_claimed_host: any process that reaches this port can claim any peer id " +
			"while that peer has no live session here, answer lookups HIT and serve forged blocks with correct CRCs. " +
			"Close it with mutual TLS and one certificate per rank (docs/security.md)."
	case mode == identityPlain && len(shared) > 0:
		return "plain TCP with several ranks on " + strings.Join(shared, ", ") + ": any process on such a host can claim " +
			"any of its ranks while that rank has no live session here, answer lookups HIT and serve forged blocks " +
			"with correct CRCs, or fetch what that rank could. Close it with mutual TLS and one certificate per rank " +
			"(tls.cert_file naming kvp2p://host:port; docs/security.md)."
	}
	return ""
}

// sharedHosts are the hosts with two or more of ids (peer ids), sorted.
func sharedHosts(ids []string) []string {
	ports := map[string]map[string]bool{}
	for _, id := range ids {
		h, p, err := net.SplitHostPort(id)
		if err != nil {
			continue
		}
		if ports[h] == nil {
			ports[h] = map[string]bool{}
		}
		ports[h][p] = true
	}
	var out []string
	for h, ps := range ports {
		if len(ps) > 1 {
			out = append(out, h)
		}
	}
	slices.Sort(out)
	return out
}

// rankHosts remembers, per host, the first rank seen on it, so that the
// node logs once per host the first time it sees a second rank there (on
// plain TCP). At most maxRankHosts hosts; the loop owns it.
type rankHosts struct {
	first map[string]string // host -> a peer id on it
	said  map[string]bool
}

const maxRankHosts = 4096

// noteRank logs, once per host, that a second rank of a host is in view
// on plain TCP, and what a process there can do.
func (n *Node) noteRank(id string) {
	if n.identityMode() != identityPlain {
		return // mTLS proves the rank; trust_claimed_host said it all at start
	}
	r := &n.ranks
	if r.first == nil {
		r.first, r.said = map[string]string{}, map[string]bool{}
		if h, _, err := net.SplitHostPort(n.cfg.PeerID); err == nil {
			r.first[h] = n.cfg.PeerID
		}
	}
	h, _, err := net.SplitHostPort(id)
	if err != nil || r.said[h] {
		return
	}
	first, ok := r.first[h]
	switch {
	case !ok:
		if len(r.first) < maxRankHosts {
			r.first[h] = id
		}
	case first != id:
		r.said[h] = true
		n.log.Warn("identity: "+sameHostExposure(n.identityMode(), []string{h}), "ranks", first+" "+id)
	}
}
