package node

import (
	"slices"
	"time"
)

// maxDNSMembers bounds the peers DNS answers can add: a deployment larger
// than this lists its members otherwise, and a rogue answer cannot make
// the node dial without end. The failure policy keeps at most 4,096
// peers too (internal/health).
const maxDNSMembers = 4096

// members is the deployment's membership as the finder has it: the static
// list (find.peers) and the peers the DNS entries (find.dns) resolved to.
// It belongs to the loop and does no I/O: DNS answers come in as events
// (find_dns.go), the time as an argument.
//
// A peer an answer no longer names is not dropped at once: DNS flaps (an
// endpoint briefly not ready, a truncated or stale answer), so it stays a
// member until the answers of its entry have lacked it for the grace
// period. A failed lookup says nothing about anyone and changes nothing;
// an answer that the name does not exist is an empty answer (a headless
// Service with no ready endpoint has no records).
type members struct {
	static []string
	grace  time.Duration
	// dns: by entry, the peers its answers named, and since when the
	// latest answers lack each (zero: the latest answer named it).
	dns     map[string]map[string]time.Time
	dnsSize int // peers in dns, all entries
}

func newMembers(static []string, grace time.Duration) *members {
	return &members{static: static, grace: grace, dns: map[string]map[string]time.Time{}}
}

// resolved applies an answer for entry at now: peers it names (nil: none).
// It returns how many named peers were left out at maxDNSMembers.
func (m *members) resolved(now time.Time, entry string, peers []string) (over int) {
	got := m.dns[entry]
	if got == nil {
		got = map[string]time.Time{}
		m.dns[entry] = got
	}
	named := make(map[string]bool, len(peers))
	for _, p := range peers {
		if _, ok := got[p]; !ok {
			if m.dnsSize >= maxDNSMembers {
				over++
				continue
			}
			m.dnsSize++
		}
		got[p] = time.Time{}
		named[p] = true
	}
	for p, since := range got {
		if !named[p] && since.IsZero() {
			got[p] = now
		}
	}
	return over
}

// list returns every member at now, each once: the static ones, then those
// from DNS in order. Peers whose answers have lacked them for the grace
// period are dropped here.
func (m *members) list(now time.Time) []string {
	out := slices.Clone(m.static)
	seen := make(map[string]bool, len(m.static)+m.dnsSize)
	for _, p := range m.static {
		seen[p] = true
	}
	var fromDNS []string
	for _, got := range m.dns {
		for p, since := range got {
			if !since.IsZero() && now.Sub(since) >= m.grace {
				delete(got, p)
				m.dnsSize--
				continue
			}
			if !seen[p] {
				seen[p] = true
				fromDNS = append(fromDNS, p)
			}
		}
	}
	slices.Sort(fromDNS)
	return append(out, fromDNS...)
}
