package health

import "time"

// Standing is implemented by every policy: whether a peer may be chosen as
// a source that no request named (internal/summary's Find). It is
// read-only, like View: it decides nothing, starts no probe and lifts no
// ejection, so that asking it per candidate changes nothing. A peer not in
// good standing is one a named source would be held back from: ejected or
// quarantined, or (domain) in a suspect domain or still owing a check.
type Standing interface {
	InGoodStanding(now time.Time, p Peer) bool
}

// InGoodStanding implements Standing: per-peer ejects nobody.
func (*perPeer) InGoodStanding(time.Time, Peer) bool { return true }

// InGoodStanding implements Standing: not on a quarantined host.
func (h *hostGroup) InGoodStanding(now time.Time, p Peer) bool {
	t, ok := h.until[HostOf(p.ID)]
	return !ok || !now.Before(t)
}

// InGoodStanding implements Standing: a known peer, not ejected, not owing
// a probe, in a domain that is not suspect. An unknown peer (no session
// ever) is not: a found source must be one this node has a session with.
func (d *domainPolicy) InGoodStanding(now time.Time, p Peer) bool {
	ph := d.peers[p.ID]
	if ph == nil {
		return false
	}
	if !ph.ejectedUntil.IsZero() && now.Before(ph.ejectedUntil) || ph.halfOpen || ph.mustProbe {
		return false
	}
	dh := d.domains[ph.domain]
	return dh == nil || !d.suspect(now, dh)
}
