package node

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/summary"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// TestFindStatsMirrorIndex: after every part of a random sequence of
// snapshots split in two, deltas, lost parts (gaps) and parts of an unknown
// format, from three peers, the peers findStats counts usable are exactly
// those the Index uses, and every part is counted applied or refused.
func TestFindStatsMirrorIndex(t *testing.T) {
	const maxAge = 3 * time.Second
	rng := rand.New(rand.NewPCG(1, 2))
	x := summary.NewIndex(0)
	f := &finder{cfg: FindConfig{MaxAge: maxAge}, index: x, stats: newFindStats()}
	k := wire.Key{7}
	peers := []string{"a:1", "b:1", "c:1"}
	prods := make([]*summary.Producer, len(peers))
	for i := range prods {
		prods[i], _ = summary.NewProducer(64, uint64(i+1))
		_ = prods[i].Store(0, k) // every whole summary holds k
	}
	now := time.Unix(0, 0)
	parts := 0
	apply := func(peer string, m wire.Summary) {
		parts++
		if err := x.Apply(peer, &m, now); err != nil {
			f.stats.refused(peer, err)
		} else {
			f.stats.applied(now, peer, &m)
		}
	}
	for step := range 2000 {
		now = now.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
		i := rng.IntN(len(peers))
		p, peer := prods[i], peers[i]
		_ = p.Store(1+rng.IntN(63), wire.Key{byte(step), byte(step >> 8), 1})
		switch rng.IntN(6) {
		case 0: // a snapshot in two parts
			snap := p.Snapshot()[0]
			first, rest := snap, snap
			first.Last, rest.Reset = false, false
			first.Words, first.Values = nil, nil
			apply(peer, first)
			apply(peer, rest)
		case 1: // a delta lost: the next one is a gap
			p.Flush()
		case 2: // a format this side does not read
			m := p.Flush()[0]
			m.Format++
			apply(peer, m)
		default:
			for _, m := range p.Flush() {
				apply(peer, m)
			}
		}
		var usable []string
		for _, c := range x.Prefixes(summary.Query{Keys: []wire.Key{k}, Now: now, MaxAge: maxAge}) {
			usable = append(usable, c.Peer)
		}
		slices.Sort(usable)
		var mirror []string
		for p, at := range f.stats.whole {
			if now.Sub(at) <= maxAge {
				mirror = append(mirror, p)
			}
		}
		slices.Sort(mirror)
		if !slices.Equal(usable, mirror) {
			t.Fatalf("step %d: the Index uses %v, the stats count %v", step, usable, mirror)
		}
		if s := f.snapshot(now); s.PeersUsable != len(usable) || s.PeersUnusable != x.Len()-len(usable) {
			t.Fatalf("step %d: snapshot %+v for %d usable of %d", step, s, len(usable), x.Len())
		}
	}
	r := f.stats.c.Refused
	if f.stats.c.Applied+r.Gap+r.Format+r.Size+r.Other != uint64(parts) || r.Gap == 0 || r.Format == 0 {
		t.Fatalf("%d parts, counted %+v", parts, f.stats.c)
	}
}

// TestReportsRefusedCounted: stored reports the summary cannot take (here:
// a node that summarises its own store) are counted each, and logged once
// in a minute.
func TestReportsRefusedCounted(t *testing.T) {
	n := startTN(t, nodeOpt{mut: func(c *Config) { c.Find = FindConfig{Enabled: true} }})
	if err := n.Do(func(time.Time) {
		for range 5 {
			if n.NoteStored(0, wire.Key{1}) == nil {
				t.Error("NoteStored took a report on a node that scans its store")
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	s, err := n.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Counters.Summaries.ReportsRefused; got != 5 {
		t.Errorf("%d reports refused, want 5", got)
	}
	if c := strings.Count(n.logs.String(), "stored blocks not summarised"); c != 1 {
		t.Errorf("logged %d times, want once:\n%s", c, n.logs.String())
	}
}

// BenchmarkSummaryBytesIn: what counting a received part's bytes costs
// the loop (encoding it again) beside applying it, for a snapshot of a
// full 8,192-chunk tier and for a one-interval delta of 64 stores.
func BenchmarkSummaryBytesIn(b *testing.B) {
	p, _ := summary.NewProducer(8192, 1)
	for c := range 8192 {
		_ = p.Store(c, wire.Key{byte(c), byte(c >> 8), 3})
	}
	p.Flush()
	snap := p.Snapshot()
	for c := range 64 {
		_ = p.Store(c, wire.Key{byte(c), 9})
	}
	delta := p.Flush()
	now := time.Unix(0, 0)
	b.Run("snapshot/apply", func(b *testing.B) {
		x := summary.NewIndex(0)
		for b.Loop() {
			for i := range snap {
				_ = x.Apply("a", &snap[i], now)
			}
		}
	})
	b.Run("delta/apply", func(b *testing.B) {
		x := summary.NewIndex(0)
		for b.Loop() {
			b.StopTimer() // a delta applies once, on top of its snapshot
			for i := range snap {
				_ = x.Apply("a", &snap[i], now)
			}
			b.StartTimer()
			for i := range delta {
				_ = x.Apply("a", &delta[i], now)
			}
		}
	})
	for name, parts := range map[string][]wire.Summary{"snapshot/size": snap, "delta/size": delta} {
		b.Run(name, func(b *testing.B) {
			s := newFindStats()
			b.SetBytes(int64(s.sizes(parts)))
			for b.Loop() {
				s.sizes(parts)
			}
		})
	}
}
