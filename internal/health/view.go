package health

import (
	"sort"
	"time"
)

// Domain states, as an operator sees them (metrics, status page).
const (
	StateOK      = "ok"      // nothing held against the domain
	StateSuspect = "suspect" // a fault turned it suspect: its members are being probed or must prove their data path
	StateEjected = "ejected" // at least one member is ejected (domain) or the host is quarantined (host-group)
)

// States lists the domain states in display order.
func States() []string { return []string{StateOK, StateSuspect, StateEjected} }

// PeerView is what a policy holds about one peer, for operators.
type PeerView struct {
	ID   string
	Live bool // a ready session exists
	// EjectedFor is the ejection (or quarantine) time left; 0 if none.
	EjectedFor time.Duration
	Probing    bool // a probe of its data path is outstanding
	// Delivering: a check of its data path runs and the data path
	// delivered since it began (alive, its answer late: docs/liveness.md).
	Delivering bool
	Faults     int // fault ends without a successful load in between
}

// DomainView is one failure domain and its known members.
type DomainView struct {
	Domain string
	State  string // StateOK, StateSuspect or StateEjected
	Peers  []PeerView
}

// Stats are a policy's cumulative counts since it was built.
type Stats struct {
	ProbesFailed  uint64 // probes that went unanswered within the probe timeout, from a silent data path
	ProbesRenewed uint64 // probes unanswered within the probe timeout whose data path delivered meanwhile (slow, not dead)
	Ejections     uint64 // ejections (domain) or host quarantines (host-group) begun
}

// Viewer is implemented by policies that keep per-domain state. View is
// read-only: it must not lift ejections or change anything else, so that
// observing a node never changes what it decides.
type Viewer interface {
	View(now time.Time) ([]DomainView, Stats)
}

// View implements Viewer.
func (d *domainPolicy) View(now time.Time) ([]DomainView, Stats) {
	names := make([]string, 0, len(d.domains))
	for name := range d.domains {
		names = append(names, name)
	}
	sort.Strings(names)
	out := make([]DomainView, 0, len(names))
	for _, name := range names {
		dh := d.domains[name]
		dv := DomainView{Domain: name, State: StateOK}
		ejected := false
		for _, id := range sortedIDs(dh.members) {
			ph := dh.members[id]
			pv := PeerView{ID: id, Live: ph.live, Probing: ph.probeSeq != 0, Delivering: !ph.heardAt.IsZero(), Faults: ph.faults}
			if !ph.ejectedUntil.IsZero() && now.Before(ph.ejectedUntil) {
				pv.EjectedFor = ph.ejectedUntil.Sub(now)
				ejected = true
			}
			dv.Peers = append(dv.Peers, pv)
		}
		switch {
		case ejected:
			dv.State = StateEjected
		case d.suspect(now, dh):
			dv.State = StateSuspect
		}
		out = append(out, dv)
	}
	return out, d.stats
}

// View implements Viewer: a host is a domain; a quarantined one shows as
// ejected with its time left.
func (h *hostGroup) View(now time.Time) ([]DomainView, Stats) {
	seen := map[string]bool{}
	for host := range h.hosts {
		seen[host] = true
	}
	for host, t := range h.until {
		if now.Before(t) {
			seen[host] = true
		}
	}
	names := make([]string, 0, len(seen))
	for host := range seen {
		names = append(names, host)
	}
	sort.Strings(names)
	out := make([]DomainView, 0, len(names))
	for _, host := range names {
		dv := DomainView{Domain: host, State: StateOK}
		var left time.Duration
		if t, ok := h.until[host]; ok && now.Before(t) {
			dv.State, left = StateEjected, t.Sub(now)
		}
		ids := make([]string, 0, len(h.hosts[host]))
		for id := range h.hosts[host] {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			dv.Peers = append(dv.Peers, PeerView{ID: id, Live: true, EjectedFor: left})
		}
		out = append(out, dv)
	}
	return out, h.stats
}
