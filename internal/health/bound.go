package health

import (
	"cmp"
	"slices"
)

// maxRemembered caps the peers the domain policy knows at once, besides
// the age limit (forgetAfter): 90,000 handshakes with made-up ids in 20 s
// grew the heap by 40 MiB (~465 B per id) for ten minutes (issue 25). Past
// the cap the least recently seen peers that nothing refers to are
// forgotten, an eighth of the cap at a time (a sort per cap/8 new ids, not
// a scan per id). A peer with a session, a probe or an ejection is never
// forgotten: those are bounded by max_peers and the ejection cap.
const maxRemembered = 4096

// forgettable: nothing refers to the peer (no session, no probe, no
// ejection); what it knows is only its history.
func (ph *peerHealth) forgettable() bool {
	return ph.ups == 0 && ph.probeSeq == 0 && ph.ejectedUntil.IsZero()
}

// makeRoom forgets the least recently seen forgettable peers when a new
// one would pass maxRemembered.
func (d *domainPolicy) makeRoom() {
	if len(d.peers) < maxRemembered {
		return
	}
	old := make([]*peerHealth, 0, len(d.peers))
	for _, ph := range d.peers {
		if ph.forgettable() {
			old = append(old, ph)
		}
	}
	slices.SortFunc(old, func(a, b *peerHealth) int {
		if c := a.lastSeen.Compare(b.lastSeen); c != 0 {
			return c
		}
		return cmp.Compare(a.peer.ID, b.peer.ID)
	})
	for _, ph := range old[:min(len(old), maxRemembered/8)] {
		d.forget(ph.peer.ID, ph)
	}
}

// forget drops a peer, and its domain if that is left empty: the ejection
// cap then counts the domains seen lately, not every one ever named.
func (d *domainPolicy) forget(id string, ph *peerHealth) {
	delete(d.peers, id)
	if dh := d.domains[ph.domain]; dh != nil {
		delete(dh.members, id)
		if len(dh.members) == 0 {
			delete(d.domains, ph.domain)
		}
	}
}
