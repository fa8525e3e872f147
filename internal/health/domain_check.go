package health

import "fmt"

// check verifies the domain policy's internal bookkeeping: every peer sits
// in the member map of its domain and nowhere else; a domain's probing
// count equals its members' outstanding probes, and every outstanding probe
// is indexed by its seq; a domain's ejected count equals its members whose
// ejection has not been lifted (ejections end lazily, on the next look at
// the peer); no counter is negative. Tests call it after every step.
func (d *domainPolicy) check() error {
	for id, ph := range d.peers {
		if ph.peer.ID != id {
			return fmt.Errorf("peer %q stored under %q", ph.peer.ID, id)
		}
		dh := d.domains[ph.domain]
		if dh == nil || dh.members[id] != ph {
			return fmt.Errorf("peer %q missing from its domain %q", id, ph.domain)
		}
		if ph.probeSeq != 0 {
			if d.probes[ph.probeSeq] != id {
				return fmt.Errorf("peer %q: probe %d not indexed", id, ph.probeSeq)
			}
			if !ph.live {
				return fmt.Errorf("peer %q: probe %d outstanding on a dead session", id, ph.probeSeq)
			}
			if ph.probeFirst == 0 || ph.probeFirst > ph.probeSeq {
				return fmt.Errorf("peer %q: check began at probe %d, outstanding %d", id, ph.probeFirst, ph.probeSeq)
			}
		} else if ph.probeFirst != 0 || !ph.heardAt.IsZero() {
			return fmt.Errorf("peer %q: no check running, but first %d, heard at %v", id, ph.probeFirst, ph.heardAt)
		}
		if ph.faults < 0 || ph.ejections < 0 {
			return fmt.Errorf("peer %q: faults %d, ejections %d", id, ph.faults, ph.ejections)
		}
		if ph.halfOpen && ph.ejectedUntil.IsZero() {
			return fmt.Errorf("peer %q: half-open but not ejected", id)
		}
	}
	for seq, id := range d.probes {
		ph := d.peers[id]
		if ph == nil || ph.probeSeq != seq {
			return fmt.Errorf("probe %d indexed for %q, which is not waiting for it", seq, id)
		}
		if seq > d.seq {
			return fmt.Errorf("probe %d beyond the last seq %d", seq, d.seq)
		}
	}
	for name, dh := range d.domains {
		probing, ejected := 0, 0
		for id, m := range dh.members {
			if m.domain != name || d.peers[id] != m {
				return fmt.Errorf("domain %q: stray member %q (in %q)", name, id, m.domain)
			}
			if m.probeSeq != 0 && m.probeRound {
				probing++
			}
			if !m.ejectedUntil.IsZero() {
				ejected++
			}
		}
		if dh.probing != probing {
			return fmt.Errorf("domain %q: probing %d, outstanding probes %d", name, dh.probing, probing)
		}
		if dh.ejected != ejected {
			return fmt.Errorf("domain %q: ejected %d, ejected members %d", name, dh.ejected, ejected)
		}
		if dh.epoch == 0 {
			return fmt.Errorf("domain %q: epoch 0", name)
		}
	}
	return nil
}
