package summary

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/wire"
)

func testKey(r *rand.Rand) (k wire.Key) {
	binary.LittleEndian.PutUint64(k[:8], r.Uint64())
	binary.LittleEndian.PutUint64(k[8:], r.Uint64())
	return k
}

// chain is a request's keys: n random keys from seed.
func chain(seed uint64, n int) []wire.Key {
	r := rand.New(rand.NewPCG(seed, 1))
	ks := make([]wire.Key, n)
	for i := range ks {
		ks[i] = testKey(r)
	}
	return ks
}

// TestPositionVectors pins Position, which the Python side reimplements
// (docs/find.md lists these vectors).
func TestPositionVectors(t *testing.T) {
	var k0, k1 wire.Key
	for i := range k1 {
		k1[i] = byte(i)
	}
	for _, tc := range []struct {
		k     wire.Key
		words uint32
		want  Probe
	}{
		// Computed by an independent Python implementation of the steps
		// in Position's comment (word 0 is Format 1's word and bits).
		{k0, 1024, Probe{[2]uint32{431, 57}, [2]uint64{0x0610080000000820, 0x0040002802110000}}},
		{k1, 1024, Probe{[2]uint32{259, 592}, [2]uint64{0x8000800a00220000, 0x0000410000200230}}},
		{k1, 1 << 20, Probe{[2]uint32{592131, 547408}, [2]uint64{0x8000800a00220000, 0x0000410000200230}}},
	} {
		if got := Position(tc.k, tc.words); got != tc.want {
			t.Errorf("Position(%x, %d) = %+v; want %+v", tc.k, tc.words, got, tc.want)
		}
	}
}

// TestFalsePositiveRate: a full tier's filter answers yes for about
// 0.0016% of keys it does not hold (BitsPerKey's claim; docs/find.md
// derives it), so that a key nobody holds tests present in one of 1,000
// full peers' filters about 1.6% of the time.
func TestFalsePositiveRate(t *testing.T) {
	const chunks = 1 << 16
	p, err := NewProducer(chunks, 1)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for c := range chunks {
		if err := p.Store(c, testKey(r)); err != nil {
			t.Fatal(err)
		}
	}
	const probes = 1 << 22
	fp := 0
	for range probes {
		if p.Has(testKey(r)) {
			fp++
		}
	}
	rate := float64(fp) / probes
	any1000 := 1 - math.Pow(1-rate, 1000)
	t.Logf("%d chunks, %d words: false positives %d of %d, %.5f%%; present in one of 1,000 such filters: %.2f%%",
		chunks, p.Size(), fp, probes, 100*rate, 100*any1000)
	// The model's 1.64e-5 (69 expected), with room for the count's noise
	// (sd about 8) but not for Format 1's 3.9e-3 or a one-word layout's
	// 3e-4 at the same size.
	if rate > 2.5e-5 {
		t.Fatalf("false positive rate %.6f, want under 0.0025%%", rate)
	}
}

// send encodes parts through the wire, as a node does, and applies them.
func send(t *testing.T, x *Index, peer string, parts []wire.Summary, now time.Time) error {
	t.Helper()
	var err error
	for i := range parts {
		b, aerr := wire.Append(nil, &parts[i])
		if aerr != nil {
			t.Fatalf("Append: %v", aerr)
		}
		m, derr := wire.Decode(wire.Type(b[5]), b[6:], wire.DefaultLimits())
		if derr != nil {
			t.Fatalf("Decode: %v", derr)
		}
		if e := x.Apply(peer, m.(*wire.Summary), now); e != nil && err == nil {
			err = e
		}
	}
	return err
}

func sameWords(t *testing.T, x *Index, peer string, p *Producer) {
	t.Helper()
	s := x.peers[x.byID[peer]]
	if !s.ok {
		t.Fatalf("%s not usable", peer)
	}
	for w := range p.sent {
		if s.words[w] != p.sent[w] {
			t.Fatalf("word %d: receiver %#x, producer published %#x (seq %d/%d)", w, s.words[w], p.sent[w], s.seq, p.seq)
		}
	}
}

// TestDeltasTrackProducer: after any run of stores and removals, a
// receiver that got a snapshot and every delta holds exactly the
// producer's published filter, and a late receiver's snapshot joins it.
func TestDeltasTrackProducer(t *testing.T) {
	const chunks = 3000
	p, _ := NewProducer(chunks, 7)
	x, late := NewIndex(0), NewIndex(0)
	now := time.Unix(1000, 0)
	if err := send(t, x, "a", p.Snapshot(), now); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	for round := range 50 {
		for range r.IntN(400) {
			c := r.IntN(chunks)
			if r.IntN(5) == 0 {
				p.Remove(c)
			} else if err := p.Store(c, testKey(r)); err != nil {
				t.Fatal(err)
			}
		}
		delta := p.Flush()
		if err := send(t, x, "a", delta, now); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		sameWords(t, x, "a", p)
		switch {
		case round == 20:
			if err := send(t, late, "a", p.Snapshot(), now); err != nil {
				t.Fatal(err)
			}
		case round > 20:
			if err := send(t, late, "a", delta, now); err != nil {
				t.Fatalf("late, round %d: %v", round, err)
			}
			sameWords(t, late, "a", p)
		}
	}
}

// TestRemovalIsLearnt: a key replaced in its chunk stops being found.
func TestRemovalIsLearnt(t *testing.T) {
	p, _ := NewProducer(64, 1)
	x := NewIndex(0)
	ks := chain(1, 2)
	_ = p.Store(5, ks[0])
	now := time.Unix(0, 0)
	_ = send(t, x, "a", p.Snapshot(), now)
	_ = send(t, x, "a", p.Flush(), now)
	if got, ok := x.Find(Query{Keys: ks[:1]}); !ok || got.Blocks != 1 {
		t.Fatalf("after the store: %+v %v", got, ok)
	}
	_ = p.Store(5, ks[1]) // chunk 5 reused: ks[0] is gone
	_ = send(t, x, "a", p.Flush(), now)
	if got, ok := x.Find(Query{Keys: ks[:1]}); ok {
		t.Fatalf("after the chunk was reused: %+v", got)
	}
	if st := p.Stats(); st.Stores != 2 || st.Removals != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestRemovalSharedWords: removals recompute every word a key touched
// from the keys left, also when a key's two words are one (a one-word
// filter) and when words are shared by many keys: after storing keys in
// random chunks, reusing and removing chunks, the filter equals one built
// afresh from what the chunks hold.
func TestRemovalSharedWords(t *testing.T) {
	for _, chunks := range []int{1, 2, 5, 300} {
		p, _ := NewProducer(chunks, 1)
		r := rand.New(rand.NewPCG(uint64(chunks), 3))
		held := make([]*wire.Key, chunks)
		for range 20 * chunks {
			c := r.IntN(chunks)
			if r.IntN(4) == 0 {
				p.Remove(c)
				held[c] = nil
				continue
			}
			k := testKey(r)
			_ = p.Store(c, k)
			held[c] = &k
		}
		want := make([]uint64, p.Size())
		for _, k := range held {
			if k != nil {
				pos := Position(*k, p.Size())
				for i := range Probes {
					want[pos.Word[i]] |= pos.Mask[i]
				}
			}
		}
		for w := range want {
			if p.words[w] != want[w] {
				t.Fatalf("%d chunks, word %d: %#x, built afresh %#x", chunks, w, p.words[w], want[w])
			}
		}
	}
}

// TestApplyRefuses: gaps, other epochs, unknown formats and oversized
// filters leave the peer out until a snapshot.
func TestApplyRefuses(t *testing.T) {
	p, _ := NewProducer(1000, 1)
	ks := chain(2, 3)
	for i, k := range ks {
		_ = p.Store(i, k)
	}
	now := time.Unix(0, 0)
	q := Query{Keys: ks}
	usable := func(x *Index) bool { _, ok := x.Find(q); return ok }

	x := NewIndex(0)
	if err := send(t, x, "a", p.Flush(), now); !errors.Is(err, ErrGap) || usable(x) {
		t.Fatalf("delta before a snapshot: %v", err)
	}
	if err := send(t, x, "a", p.Snapshot(), now); err != nil || !usable(x) {
		t.Fatalf("snapshot: %v", err)
	}
	p.Flush() // lost
	if err := send(t, x, "a", p.Flush(), now); !errors.Is(err, ErrGap) || usable(x) {
		t.Fatalf("a missed delta: %v", err)
	}
	if err := send(t, x, "a", p.Snapshot(), now); err != nil || !usable(x) {
		t.Fatalf("snapshot after the gap: %v", err)
	}
	other, _ := NewProducer(1000, 2)
	if err := send(t, x, "a", other.Flush(), now); !errors.Is(err, ErrGap) || usable(x) {
		t.Fatalf("another epoch's delta: %v", err)
	}
	snap := p.Snapshot()
	snap[0].Format = Format + 1
	if err := send(t, x, "a", snap, now); !errors.Is(err, ErrFormat) || usable(x) {
		t.Fatalf("unknown format: %v", err)
	}
	small := NewIndex(8)
	if err := send(t, small, "a", p.Snapshot(), now); !errors.Is(err, ErrSize) || usable(small) {
		t.Fatalf("filter over the bound: %v", err)
	}
	if x.Bytes() < 8*int(p.Size()) || small.Bytes() > 200 {
		t.Fatalf("Bytes: %d, %d", x.Bytes(), small.Bytes())
	}
}

// fleet builds an index of peers, peer i holding the first held[i] keys.
func fleet(t *testing.T, keys []wire.Key, held []int, now time.Time) *Index {
	t.Helper()
	x := NewIndex(0)
	for i, n := range held {
		// Tiers of three sizes, so that filters of several sizes are
		// probed in one Find (its positions are cached per size).
		p, _ := NewProducer(4096>>(i%3), uint64(i))
		for c := range n {
			_ = p.Store(c, keys[c])
		}
		p.Flush()
		if err := send(t, x, peerName(i), p.Snapshot(), now); err != nil {
			t.Fatal(err)
		}
	}
	return x
}

func peerName(i int) string { return string(rune('a' + i)) }

func TestFind(t *testing.T) {
	keys := chain(9, 40)
	now := time.Unix(100, 0)
	x := fleet(t, keys, []int{10, 20, 0, 20, 5}, now)
	loads := map[string]int{"b": 5, "d": 3}
	q := Query{Keys: keys, Now: now, Load: func(p string) int { return loads[p] }}
	for _, tc := range []struct {
		name string
		edit func(*Query)
		want Candidate
		ok   bool
	}{
		{"longest, then least loaded", func(*Query) {}, Candidate{"d", 20}, true},
		{"least loaded refused", func(q *Query) { q.Eligible = func(p string) bool { return p != "d" } }, Candidate{"b", 20}, true},
		{"scan rotated", func(q *Query) { q.Start = 3 }, Candidate{"d", 20}, true},
		{"short request", func(q *Query) { q.Keys = keys[:7] }, Candidate{"a", 7}, true},
		{"held locally already", func(q *Query) { q.From = 20 }, Candidate{}, false},
		{"only short ones eligible", func(q *Query) { q.Eligible = func(p string) bool { return p == "a" || p == "e" } }, Candidate{"a", 10}, true},
		{"stale", func(q *Query) { q.Now = now.Add(time.Minute); q.MaxAge = time.Second }, Candidate{}, false},
		{"nobody holds it", func(q *Query) { q.Keys = chain(10, 30) }, Candidate{}, false},
	} {
		q := q
		tc.edit(&q)
		got, ok := x.Find(q)
		if ok != tc.ok || got != tc.want {
			t.Errorf("%s: Find = %+v, %v; want %+v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	got := x.Prefixes(Query{Keys: keys, Now: now})
	want := map[string]int{"a": 10, "b": 20, "d": 20, "e": 5}
	if len(got) != len(want) {
		t.Fatalf("Prefixes = %+v", got)
	}
	for _, c := range got {
		if want[c.Peer] != c.Blocks {
			t.Errorf("Prefixes: %+v, want %d", c, want[c.Peer])
		}
	}
	x.Remove("d")
	if got, ok := x.Find(q); !ok || got.Peer != "b" || x.Len() != 4 {
		t.Fatalf("after Remove: %+v %v", got, ok)
	}
}

// TestFindMatchesNaive: on random prefix-shaped holdings, Find's answer has
// the longest prefix a key-by-key walk finds, among the peers that hold
// MinRun keys past From (or up to the end).
func TestFindMatchesNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for trial := range 200 {
		keys := chain(uint64(trial), 1+r.IntN(64))
		held := make([]int, 1+r.IntN(8))
		for i := range held {
			held[i] = r.IntN(len(keys) + 1)
		}
		x := fleet(t, keys, held, time.Time{})
		from := r.IntN(len(keys))
		want := from
		for _, s := range x.peers {
			n := 0
			for n < len(keys) && Has(s.words, keys[n]) {
				n++
			}
			if n-from >= min(MinRun, len(keys)-from) {
				want = max(want, n)
			}
		}
		got, ok := x.Find(Query{Keys: keys, From: from})
		if ok != (want > from) || ok && got.Blocks != want {
			t.Fatalf("trial %d held %v from %d: Find = %+v %v, naive %d", trial, held, from, got, ok, want)
		}
	}
}
