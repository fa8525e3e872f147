package loads

import (
	"github.com/kvp2p/kvp2p/internal/store"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// Lookup pins are a shared resource: a lookup's HIT pins the block until
// the fetch that follows has sent it (or LookupPinTimeout passes). Two
// bounds keep one peer from starving the others (issue 25, attack 3: one
// peer's 100-key lookups pinned the whole share and a healthy consumer's
// lookups all missed), both counted in slots, not pins (lookups of one
// key by many requests pin one slot many times, which costs the store
// one slot):
//
//   - all peers together pin at most the peers' share, half the store's
//     slots, so that peers never pin what the local engine needs to write;
//   - one session pins at most share/(k+1) slots, k being the sessions
//     holding pins counting itself. With a single greedy peer, what is
//     left of the share is at least another peer's quota, so a peer that
//     starts looking up finds room at once; as more peers pin, each one's
//     quota shrinks, and the pins a peer holds above its new quota are not
//     renewed when they go (their fetch, or LookupPinTimeout).
//
// A key over either bound is a MISS (a fallback to local prefill, never
// an error). A lone peer may pin a quarter of the store: a request whose
// prefix is longer than that loads its first blocks and prefills the rest.
func (t *Table) pinQuota(c *conn) int {
	k := t.pinners
	if len(c.pins) == 0 {
		k++
	}
	return max(1, t.peerShare()/(k+1))
}

// peerShare is the number of slots peers' lookups may pin.
func (t *Table) peerShare() int { return t.store.NumSlots() / 2 }

// peerBlocks is the producer's view of the store for one session: it
// counts that session's pins against its quota.
type peerBlocks struct {
	t *Table
	c *conn
}

// PinKey pins k for a lookup of c's peer, within the share and c's quota.
// The slot is known only once pinned: a pin over a bound is undone.
func (b peerBlocks) PinKey(k wire.Key) (store.Slot, bool) {
	t, c := b.t, b.c
	sl, ok := t.store.PinKey(k)
	if !ok {
		return 0, false
	}
	_, mine := c.pins[sl]
	_, peers := t.peerSlots[sl]
	// A session over its quota (it shrank as others began to pin) renews
	// nothing, not even the slots it holds, until it is back within it.
	q := t.pinQuota(c)
	if len(c.pins) > q || (!mine && len(c.pins) >= q) || (!peers && len(t.peerSlots) >= t.peerShare()) {
		_ = t.store.Unpin(sl) // cannot fail: pinned just now
		return 0, false
	}
	if c.pins == nil {
		c.pins = map[store.Slot]int{}
		t.pinners++
	}
	c.pins[sl]++
	if !mine {
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
		t.pinners--
	}
	if t.peerSlots[sl]--; t.peerSlots[sl] <= 0 {
		delete(t.peerSlots, sl)
	}
	return nil
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
