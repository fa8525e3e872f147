package loads

import (
	"net"

	"github.com/kvp2p/kvp2p/internal/session"
	"github.com/kvp2p/kvp2p/internal/store"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// Lookup pins are a shared resource: a lookup's HIT pins the block until
// the fetch that follows has sent it (or LookupPinTimeout passes). Two
// bounds keep one peer from starving the others, both counted in slots,
// not pins (lookups of one key by many requests pin one slot many times,
// which costs the store one slot):
//
//   - all peers together pin at most the peers' share, half the store's
//     slots, so that peers never pin what the local engine needs to write;
//   - one SOURCE pins at most share/(k+1) slots, k being the sources
//     holding pins counting itself. With a single greedy source, what is
//     left of the share is at least another source's quota, so a peer that
//     starts looking up finds room at once; as more sources pin, each
//     one's quota shrinks, and the pins a source holds above its new quota
//     are not renewed when they go (their fetch, or LookupPinTimeout).
//
// A source is a host, not a session: any number of sessions from one host
// (plain TCP lets a host claim every port of its own address; a host's
// ranks each hold a certificate naming the host) share one quota
// (issue 34, attack 1: 8 sessions under 8 ports of one host took the
// whole share from a healthy consumer on another host). conn.source says
// what the host is.
//
// A key over either bound is a MISS (a fallback to local prefill, never
// an error). A lone source may pin a quarter of the store: a request whose
// prefix is longer than that loads its first blocks and prefills the rest.
func (t *Table) pinQuota(s *pinSource) int {
	k := len(t.pinSources)
	if s == nil {
		k++
	}
	return max(1, t.peerShare()/(k+1))
}

// pinSource is what one source's sessions pin together: each slot, with
// how many of its sessions pin it.
type pinSource struct{ slots map[store.Slot]int }

// peerShare is the number of slots peers' lookups may pin.
func (t *Table) peerShare() int { return t.store.NumSlots() / 2 }

// source is the host c's pins and rounds are shared by: the host of its
// peer id, which the handshake proved (the source address under plain
// TCP, the certificate under mTLS). With trust_claimed_host it is the
// host claimed, unproven: that mode trusts every claim (the demo labels
// hosts 10.0.0.x on one loopback address).
func (c *conn) source() string {
	h, _, err := net.SplitHostPort(c.peer)
	if err != nil {
		return c.peer
	}
	return h
}

// peerBlocks is the producer's view of the store for one session: it
// counts that session's pins against its source's quota.
type peerBlocks struct {
	t *Table
	c *conn
}

// PinKey pins k for a lookup of c's peer, within the share and c's
// source's quota. The slot is known only once pinned: a pin over a bound
// is undone.
func (b peerBlocks) PinKey(k wire.Key) (store.Slot, bool) {
	t, c := b.t, b.c
	sl, ok := t.store.PinKey(k)
	if !ok {
		return 0, false
	}
	_, mine := c.pins[sl]
	src := t.pinSources[c.source()]
	held := 0
	ours := false
	if src != nil {
		held = len(src.slots)
		_, ours = src.slots[sl]
	}
	_, peers := t.peerSlots[sl]
	// A source over its quota (it shrank as others began to pin) renews
	// nothing, not even the slots it holds, until it is back within it.
	q := t.pinQuota(src)
	if held > q || (!ours && held >= q) || (!peers && len(t.peerSlots) >= t.peerShare()) {
		_ = t.store.Unpin(sl) // cannot fail: pinned just now
		return 0, false
	}
	if src == nil {
		src = &pinSource{slots: map[store.Slot]int{}}
		t.pinSources[c.source()] = src
	}
	if c.pins == nil {
		c.pins = map[store.Slot]int{}
	}
	c.pins[sl]++
	if !mine {
		src.slots[sl]++
		t.peerSlots[sl]++
	}
	return sl, true
}

// Unpin releases one of c's lookup pins.
func (b peerBlocks) Unpin(sl store.Slot) error {
	t, c := b.t, b.c
	if err := t.store.Unpin(sl); err != nil {
		return err
	}
	if c.pins[sl]--; c.pins[sl] > 0 {
		return nil
	}
	delete(c.pins, sl)
	if len(c.pins) == 0 {
		c.pins = nil // an idle session holds no map
	}
	if src := t.pinSources[c.source()]; src != nil {
		if src.slots[sl]--; src.slots[sl] <= 0 {
			delete(src.slots, sl)
		}
		if len(src.slots) == 0 {
			delete(t.pinSources, c.source())
		}
	}
	if t.peerSlots[sl]--; t.peerSlots[sl] <= 0 {
		delete(t.peerSlots, sl)
	}
	return nil
}

// SourceQuota is the quota of open rounds c's session shares with the
// other sessions of its source (session.SourceQuota).
func (b peerBlocks) SourceQuota() *session.SourceQuota {
	t, c := b.t, b.c
	if c.share == nil {
		sh := t.shares[c.source()]
		if sh == nil {
			sh = &sourceShare{}
			t.shares[c.source()] = sh
		}
		sh.conns++
		c.share = sh
	}
	return &c.share.q
}

// sourceShare is a source's quota of open rounds and the sessions that
// share it.
type sourceShare struct {
	q     session.SourceQuota
	conns int
}

// leaveSource drops c from its source's share; the share goes with the
// source's last session.
func (t *Table) leaveSource(c *conn) {
	if c.share == nil {
		return
	}
	if c.share.conns--; c.share.conns <= 0 {
		delete(t.shares, c.source())
	}
	c.share = nil
}

// Pending reports whether k is being loaded here, or the engine is asked
// for it: a lookup for it waits.
func (b peerBlocks) Pending(k wire.Key) bool {
	t := b.t
	if t.filling[k] > 0 {
		return true
	}
	return t.cfg.Resolver != nil && t.cfg.Resolver.Pending(uint64(b.c.id), k)
}
