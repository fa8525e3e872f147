package store

import "fmt"

// lru is the recency order of evictable slots: an intrusive doubly linked
// list over slot numbers, most recently used at the front.
//
// Like groupcache/lru it is not safe for concurrent use. Unlike it, it
// allocates nothing after newLRU: the links live in one slice indexed by
// slot (so there is no per-element node), and a sentinel at index numSlots
// closes the ring, so push and remove have no head or tail special cases.
// Links are int32 rather than Slot so that the sentinel and "unlinked" need
// no extra bits and the slice stays small.
type lru struct {
	links []link
	len   int // members, not counting the sentinel
}

type link struct{ prev, next int32 }

// unlinked marks a slot that is not on the list; Check relies on it to tell
// members from non-members without walking the list.
const unlinked int32 = -1

func newLRU(numSlots int) lru {
	links := make([]link, numSlots+1)
	for i := range numSlots {
		links[i] = link{unlinked, unlinked}
	}
	s := int32(numSlots)
	links[s] = link{s, s}
	return lru{links: links}
}

func (l *lru) sentinel() int32 { return int32(len(l.links) - 1) }

func (l *lru) contains(i int32) bool { return l.links[i].next != unlinked }

// pushFront makes i the most recently used. i must not be on the list: a
// double insert would corrupt the ring silently, so it panics instead.
func (l *lru) pushFront(i int32) {
	if l.contains(i) {
		panic(fmt.Sprintf("store: lru: slot %d already listed", i))
	}
	s := l.sentinel()
	first := l.links[s].next
	l.links[i] = link{prev: s, next: first}
	l.links[first].prev = i
	l.links[s].next = i
	l.len++
}

// remove takes i off the list; i must be on it.
func (l *lru) remove(i int32) {
	if !l.contains(i) {
		panic(fmt.Sprintf("store: lru: slot %d not listed", i))
	}
	ln := l.links[i]
	l.links[ln.prev].next = ln.next
	l.links[ln.next].prev = ln.prev
	l.links[i] = link{unlinked, unlinked}
	l.len--
}

// moveToFront makes a listed slot the most recently used.
func (l *lru) moveToFront(i int32) {
	if l.links[l.sentinel()].next == i {
		return
	}
	l.remove(i)
	l.pushFront(i)
}

// back returns the least recently used slot, if any.
func (l *lru) back() (int32, bool) {
	s := l.sentinel()
	b := l.links[s].prev
	return b, b != s
}

// members walks the ring front to back, verifying every link, and returns
// the members in order. It is for Check and allocates.
func (l *lru) members() ([]int32, error) {
	s := l.sentinel()
	var out []int32
	prev := s
	for i := l.links[s].next; i != s; i = l.links[i].next {
		if i < 0 || i >= s {
			return nil, fmt.Errorf("lru: link to %d out of range", i)
		}
		if l.links[i].prev != prev {
			return nil, fmt.Errorf("lru: slot %d: prev is %d, want %d", i, l.links[i].prev, prev)
		}
		if len(out) >= int(s) {
			return nil, fmt.Errorf("lru: cycle not through the sentinel")
		}
		out = append(out, i)
		prev = i
	}
	if l.links[s].prev != prev {
		return nil, fmt.Errorf("lru: sentinel prev is %d, want %d", l.links[s].prev, prev)
	}
	if len(out) != l.len {
		return nil, fmt.Errorf("lru: %d members, len says %d", len(out), l.len)
	}
	listed := 0
	for i := range s {
		switch {
		case l.contains(i):
			listed++
		case l.links[i].prev != unlinked:
			return nil, fmt.Errorf("lru: unlisted slot %d has prev %d", i, l.links[i].prev)
		}
	}
	if listed != len(out) {
		// A slot whose links look listed but that the ring does not reach.
		return nil, fmt.Errorf("lru: %d slots look listed, %d reachable", listed, len(out))
	}
	return out, nil
}
