package store

import (
	"math/rand/v2"
	"testing"
)

// The loop calls these on every request; they must not feed the GC. The map
// is pre-sized to NumSlots, so churn (delete one key, insert another) must
// not grow it either.
func TestZeroAllocs(t *testing.T) {
	const n = 64
	s := newStore(t, n, 16)
	data := block(16, 1)
	for i := range n {
		mustPut(t, s, key(i), 1)
	}
	// next is the next fresh key; last is a key that is surely Ready, so
	// that no op below takes an (allocating) error path by accident.
	next, last := n, n-1
	full := newStoreNoT(1)
	sums := newStore(t, n, 16)
	if err := sums.SetSumPiece(5); err != nil {
		t.Fatal(err)
	}
	_, _ = full.Reserve(key(0))
	for _, op := range []struct {
		name string
		f    func()
	}{
		{"Reserve+Commit (evicting)", func() {
			slot, _ := s.Reserve(key(next))
			_ = s.Commit(slot)
			last, next = next, next+1
		}},
		{"Reserve+CancelFill", func() {
			slot, _ := s.Reserve(key(next))
			_ = s.CancelFill(slot)
			next++
		}},
		{"Put", func() {
			_, _ = s.Put(key(next), data)
			last, next = next, next+1
		}},
		{"Put with sums", func() {
			_, _ = sums.Put(key(next), data)
			next++
		}},
		{"Lookup hit and miss", func() {
			s.Lookup(key(last))
			s.Lookup(key(-1))
		}},
		{"Contains", func() { s.Contains(key(last)) }},
		{"PinKey+Unpin", func() {
			slot, _ := s.PinKey(key(last))
			_ = s.Unpin(slot)
		}},
		{"Pin+Pin+Unpin+Unpin", func() {
			slot, _ := s.Lookup(key(last))
			_ = s.Pin(slot)
			_ = s.Pin(slot)
			_ = s.Unpin(slot)
			_ = s.Unpin(slot)
		}},
		{"Remove+Put", func() {
			s.Remove(key(last))
			_, _ = s.Put(key(last), data)
		}},
		// Under pressure the ErrFull path runs often; it allocates nothing.
		{"Reserve ErrFull", func() { _, _ = full.Reserve(key(1)) }},
	} {
		if allocs := testing.AllocsPerRun(2000, op.f); allocs != 0 {
			t.Errorf("%s: %v allocations per run, want 0", op.name, allocs)
		}
	}
	check(t, s)
	if s.Stats().Evictions < 4000 {
		t.Fatalf("the loop did not churn: %+v", s.Stats())
	}
}

// AllocsPerRun truncates the average, so an allocation every few thousand
// operations (the index map rehashing under churn) would pass above. Count
// every allocation over a long churn instead, evicting in a shuffled order.
func TestChurnDoesNotAllocate(t *testing.T) {
	for _, n := range []int{7, 64, 1000, 4096} {
		s := newStore(t, n, 8)
		for i := range n {
			mustPut(t, s, key(i), 1)
		}
		rng := rand.New(rand.NewPCG(uint64(n), 1))
		i := n
		// One run of AllocsPerRun is the total over the whole churn, not a
		// truncated average; it also pins GOMAXPROCS to 1 while it counts,
		// so other goroutines' allocations do not leak into the count.
		m := testing.AllocsPerRun(1, func() {
			for end := i + 300_000; i < end; i++ {
				s.Lookup(key(i - 1 - rng.IntN(n))) // shuffle the LRU order
				slot, err := s.Reserve(key(i))
				if err != nil {
					panic(err)
				}
				_ = s.Commit(slot)
			}
		})
		// Allow a stray runtime allocation or two. Rehashing showed up as
		// dozens to hundreds.
		if m > 2 {
			t.Errorf("slots=%d: %v allocations over 300k Reserve+Commit", n, m)
		}
		check(t, s)
	}
}

func newStoreNoT(n int) *Store {
	s, err := New(n, 8)
	if err != nil {
		panic(err)
	}
	return s
}

func BenchmarkReserveCommit(b *testing.B) {
	// Full store: every iteration evicts, deletes a key and inserts one.
	const n = 4096
	s := newStore(b, n, 64)
	for i := range n {
		mustPut(b, s, key(i), 1)
	}
	b.ReportAllocs()
	i := n
	for b.Loop() {
		slot, err := s.Reserve(key(i))
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Commit(slot); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkLookup(b *testing.B) {
	const n = 4096
	s := newStore(b, n, 64)
	for i := range n {
		mustPut(b, s, key(i), 1)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, ok := s.Lookup(key(i % n)); !ok {
			b.Fatal("miss")
		}
		i++
	}
}
