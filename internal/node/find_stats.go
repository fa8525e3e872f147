package node

import (
	"errors"
	"time"

	"github.com/kvp2p/kvp2p/internal/metrics"
	"github.com/kvp2p/kvp2p/internal/summary"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// findStats counts what finding does, for metrics and status; the loop
// owns it (the finder's).
type findStats struct {
	c metrics.SummaryCounts
	// whole mirrors which peer summaries the Index would use, and when
	// each was last completed (summary.Index keeps the same, unexported):
	// a part with Last applied makes a peer's summary whole; a reset part,
	// a refused part or the peer's removal unmakes it.
	whole   map[string]time.Time
	members int    // the members, this node left out (fitPeerCap)
	scratch []byte // sizes: frames are encoded here to be measured
}

func newFindStats() findStats { return findStats{whole: map[string]time.Time{}} }

// size is m's size on the wire, as encoded (the frame's format is the
// wire package's; encoding it again keeps the count right whatever it is).
func (s *findStats) size(m *wire.Summary) int {
	var err error
	if s.scratch, err = wire.Append(s.scratch[:0], m); err != nil {
		return 0
	}
	return len(s.scratch)
}

// sizes is the size of an update's parts on the wire.
func (s *findStats) sizes(parts []wire.Summary) int {
	n := 0
	for i := range parts {
		n += s.size(&parts[i])
	}
	return n
}

// settle drops a scratch buffer a snapshot grew, once an interval.
func (s *findStats) settle() {
	if cap(s.scratch) > 64<<10 {
		s.scratch = nil
	}
}

func (s *findStats) applied(now time.Time, peer string, m *wire.Summary) {
	s.c.Applied++
	switch {
	case m.Last:
		s.whole[peer] = now
	case m.Reset:
		delete(s.whole, peer)
	}
}

func (s *findStats) refused(peer string, err error) {
	delete(s.whole, peer)
	r := &s.c.Refused
	switch {
	case errors.Is(err, summary.ErrGap):
		r.Gap++
	case errors.Is(err, summary.ErrFormat):
		r.Format++
	case errors.Is(err, summary.ErrSize):
		r.Size++
	default:
		r.Other++
	}
}

func (s *findStats) dropped(peer string) { delete(s.whole, peer) }

// snapshot is finding's state at now for a metrics snapshot.
func (f *finder) snapshot(now time.Time) metrics.Find {
	out := metrics.Find{Enabled: true, Members: f.stats.members}
	for _, at := range f.stats.whole {
		age := now.Sub(at)
		if age > f.cfg.MaxAge {
			continue
		}
		out.PeersUsable++
		out.OldestSec = max(out.OldestSec, age.Seconds())
	}
	out.PeersUnusable = f.index.Len() - out.PeersUsable
	return out
}
