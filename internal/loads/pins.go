package loads

import (
	"github.com/kvp2p/kvp2p/internal/store"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// Lookup pins are a shared resource: a lookup's HIT pins the block until
// the fetch that follows has sent it (or LookupPinTimeout passes). Two
// bounds keep one peer from starving the others (issue 25, attack 3: one
// peer's 100-key lookups pinned the whole share and a healthy consumer's
// lookups all missed):
//
//   - all peers together pin at most the peers' share, half the store, so
//     that peers never pin what the local engine needs to write;
//   - one session pins at most share/(k+1), k being the sessions holding
//     pins counting itself. However many peers hold pins, what is left of
//     the share is at least one more peer's quota, so a peer that starts
//     looking up finds room at once, without waiting for anyone's pins to
//     time out; and as more peers pin, each one's quota shrinks, so the
//     pins a greedy peer holds above its new quota are not renewed.
//
// A key over either bound is a MISS (a fallback to local prefill, never
// an error). A lone peer may pin a quarter of the store: a request whose
// prefix is longer than that loads its first blocks and prefills the rest.
func (t *Table) pinQuota(c *conn) int {
	k := t.pinners
	if c.pins == 0 {
		k++
	}
	return max(1, t.peerShare()/(k+1))
}

// peerShare is the part of the store peers' lookups may pin.
func (t *Table) peerShare() int { return t.store.NumSlots() / 2 }

// peerBlocks is the producer's view of the store for one session: it
// counts that session's pins against its quota.
type peerBlocks struct {
	t *Table
	c *conn
}

// PinKey pins k for a lookup of c's peer, within the share and c's quota.
func (b peerBlocks) PinKey(k wire.Key) (store.Slot, bool) {
	t, c := b.t, b.c
	if t.peerPins >= t.peerShare() || c.pins >= t.pinQuota(c) {
		return 0, false
	}
	sl, ok := t.store.PinKey(k)
	if ok {
		t.peerPins++
		if c.pins++; c.pins == 1 {
			t.pinners++
		}
	}
	return sl, ok
}

// Unpin releases one of c's lookup pins.
func (b peerBlocks) Unpin(s store.Slot) error {
	t, c := b.t, b.c
	err := t.store.Unpin(s)
	if err == nil {
		t.peerPins--
		if c.pins--; c.pins == 0 {
			t.pinners--
		}
	}
	return err
}

// Pending reports whether k is being loaded here, or the engine is asked
// for it: a lookup for it waits.
func (b peerBlocks) Pending(k wire.Key) bool {
	t := b.t
	if t.filling[k] > 0 {
		return true
	}
	return t.cfg.Resolver != nil && t.cfg.Resolver.Pending(k)
}
