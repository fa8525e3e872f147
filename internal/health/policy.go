package health

import (
	"fmt"
	"time"
)

// Policy is the seam between a session's end and the rest of the fleet.
// The reap asks it what else to close, and session opening asks it whether
// a peer may be dialed. Implementations are pure and single-owner.
type Policy interface {
	// Name is the configuration name of the policy.
	Name() string
	// SessionEnded is called by the reap once per session end. live lists the
	// sessions still open, the ended one excluded. It returns the live peers
	// that must be closed in the same reap, through the same teardown.
	SessionEnded(now time.Time, ended Peer, cause Cause, live []Peer) []Peer
	// MayDial reports whether a new outbound session to peer may be opened now.
	MayDial(now time.Time, peer Peer) bool
	// HandshakeWait is how long a lookup may answer RETRY while the session's
	// handshake is pending; zero means MISS at once (vLLM #64501).
	HandshakeWait() time.Duration
}

// Policy names.
const (
	PerPeer   = "per-peer"
	HostGroup = "host-group"
)

// Options configures the policies that have knobs.
type Options struct {
	// HostQuarantine is how long host-group refuses new outbound sessions to
	// a host after one of its sessions died (PR #64678: 10 s).
	HostQuarantine time.Duration
}

// New builds the named policy.
func New(name string, opt Options) (Policy, error) {
	switch name {
	case PerPeer:
		return perPeer{}, nil
	case HostGroup:
		q := opt.HostQuarantine
		if q <= 0 {
			q = 10 * time.Second
		}
		return &hostGroup{quarantine: q, until: map[string]time.Time{}}, nil
	}
	return nil, fmt.Errorf("health: unknown policy %q (want %s or %s)", name, PerPeer, HostGroup)
}

// perPeer is vLLM main: a dead session is reaped alone; nothing else changes.
type perPeer struct{}

func (perPeer) Name() string                                       { return PerPeer }
func (perPeer) SessionEnded(time.Time, Peer, Cause, []Peer) []Peer { return nil }
func (perPeer) MayDial(time.Time, Peer) bool                       { return true }
func (perPeer) HandshakeWait() time.Duration                       { return 0 }

// hostGroup is PR #64678's group_peers_by_host. Any session end the reap
// sees (idle eviction and failed handshakes included, exactly as the PR did:
// that is what its review objected to) closes every other session to the
// same host, and quarantines the host for new outbound sessions. Inbound
// sessions are still accepted: a sibling that is control-alive could
// reconnect at once.
type hostGroup struct {
	quarantine time.Duration
	until      map[string]time.Time // host -> end of quarantine
}

func (*hostGroup) Name() string                 { return HostGroup }
func (*hostGroup) HandshakeWait() time.Duration { return 0 }

func (h *hostGroup) SessionEnded(now time.Time, ended Peer, _ Cause, live []Peer) []Peer {
	host := HostOf(ended.ID)
	h.until[host] = now.Add(h.quarantine)
	var out []Peer
	for _, p := range live {
		if HostOf(p.ID) == host {
			out = append(out, p)
		}
	}
	return out
}

func (h *hostGroup) MayDial(now time.Time, p Peer) bool {
	host := HostOf(p.ID)
	t, ok := h.until[host]
	if !ok {
		return true
	}
	if !now.Before(t) {
		delete(h.until, host)
		return true
	}
	return false
}

// Names lists the policies New accepts, the default first.
func Names() []string { return []string{PerPeer, HostGroup} }
