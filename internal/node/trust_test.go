package node

import (
	"strings"
	"testing"
)

// TestTrustModelLogged: the node says at start what proves identity.
func TestTrustModelLogged(t *testing.T) {
	f := newTLSFleet(t)
	plain := startTN(t, nodeOpt{})
	waitLog(t, plain, "identity: plain TCP: a Hello's peer id must name its source address")
	trusting := startTN(t, nodeOpt{mut: func(c *Config) { c.TrustClaimedHost = true }})
	waitLog(t, trusting, "identity: plain TCP with trust_claimed_host")
	tls := startTN(t, nodeOpt{mut: f.rank(t)})
	waitLog(t, tls, "identity: mutual TLS, one certificate per rank")
	hostOnly := startTN(t, nodeOpt{mut: func(c *Config) { c.TLS = f.node(t, "127.0.0.1") }})
	waitLog(t, hostOnly, "this node's certificate names no rank")
	if strings.Contains(tls.logs.String(), "names no rank") {
		t.Error("a rank certificate reported as naming no rank")
	}
}
