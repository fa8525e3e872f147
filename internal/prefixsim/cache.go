package prefixsim

// tier is one pod's CPU tier: chunks holding block keys, evicted least
// recently used first.
type tier struct {
	at         map[uint64]int32 // key → chunk
	key        []uint64         // chunk → key
	prev, next []int32          // LRU list over chunks; head is the most recent
	head, tail int32
	free       int32 // chunks never used yet: [free, len)
}

func newTier(chunks int) *tier {
	t := &tier{at: make(map[uint64]int32, chunks), key: make([]uint64, chunks),
		prev: make([]int32, chunks), next: make([]int32, chunks), head: -1, tail: -1}
	return t
}

func (t *tier) has(k uint64) bool { _, ok := t.at[k]; return ok }

// run is how many of ks, from i on, the tier holds in a row.
func (t *tier) run(ks []uint64, i int) int {
	n := 0
	for i+n < len(ks) && t.has(ks[i+n]) {
		n++
	}
	return n
}

func (t *tier) unlink(c int32) {
	if t.prev[c] >= 0 {
		t.next[t.prev[c]] = t.next[c]
	} else {
		t.head = t.next[c]
	}
	if t.next[c] >= 0 {
		t.prev[t.next[c]] = t.prev[c]
	} else {
		t.tail = t.prev[c]
	}
}

func (t *tier) front(c int32) {
	t.prev[c], t.next[c] = -1, t.head
	if t.head >= 0 {
		t.prev[t.head] = c
	}
	t.head = c
	if t.tail < 0 {
		t.tail = c
	}
}

// put stores k (or refreshes it: fresh false) and returns its chunk, and
// the key the chunk held before when it had to evict one.
func (t *tier) put(k uint64) (chunk int32, fresh bool, evicted uint64, did bool) {
	if c, ok := t.at[k]; ok {
		t.unlink(c)
		t.front(c)
		return c, false, 0, false
	}
	var c int32
	if int(t.free) < len(t.key) {
		c = t.free
		t.free++
	} else {
		c = t.tail
		t.unlink(c)
		evicted, did = t.key[c], true
		delete(t.at, evicted)
	}
	t.key[c] = k
	t.at[k] = c
	t.front(c)
	return c, true, evicted, did
}
