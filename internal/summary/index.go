package summary

import (
	"errors"
	"fmt"
	"time"

	"github.com/kvp2p/kvp2p/internal/wire"
)

// Errors Apply returns; each leaves the peer out of Find until a snapshot.
var (
	// ErrFormat: a summary in a Format this side does not read (a newer
	// peer); the frame was fine, the summary is ignored.
	ErrFormat = errors.New("summary: unknown format")
	// ErrSize: a filter size that is not a power of two or is over the
	// receiver's bound.
	ErrSize = errors.New("summary: bad size")
	// ErrGap: a part that does not follow what this side holds (another
	// epoch, a missed sequence number, a delta before any snapshot). The
	// sender should send a snapshot.
	ErrGap = errors.New("summary: gap")
)

// peerSummary is one peer's filter as this side holds it.
type peerSummary struct {
	id         string
	epoch, seq uint64
	words      []uint64
	ok         bool // a whole snapshot and every delta since applied
	partial    bool // parts of update seq are applied, its Last not yet
	updated    time.Time
}

// probes is a query's keys and their positions, each computed once per
// filter size rather than once per peer: the peers of a deployment share
// a size, so that a request nobody holds costs one hash, not one a peer.
type probes struct {
	keys []wire.Key
	at   []sizedProbe // per key; size 0: not computed
}

type sizedProbe struct {
	size uint32
	p    Probe
}

// reset makes ps the probes of keys, reusing its memory.
func (ps *probes) reset(keys []wire.Key) {
	ps.keys = keys
	if cap(ps.at) < len(keys) {
		ps.at = make([]sizedProbe, len(keys))
	}
	ps.at = ps.at[:len(keys)]
	clear(ps.at)
}

// has reports whether s probably holds key i.
func (ps *probes) has(s *peerSummary, i int) bool {
	n := uint32(len(s.words))
	a := &ps.at[i]
	if a.size != n {
		a.size, a.p = n, Position(ps.keys[i], n)
	}
	return a.p.In(s.words)
}

// Index holds the summaries of a node's peers.
type Index struct {
	probes   probes // Find's and Prefixes' scratch
	maxWords uint32
	peers    []*peerSummary // in arrival order; Find scans them from Query.Start
	byID     map[string]int
}

// NewIndex makes an empty index that keeps at most maxWords words per peer
// (0: MaxWords).
func NewIndex(maxWords uint32) *Index {
	if maxWords == 0 || maxWords > MaxWords {
		maxWords = MaxWords
	}
	return &Index{maxWords: maxWords, byID: map[string]int{}}
}

// Apply applies one part of peer's update, received at now. An error says
// why the part was not applied (and the peer is out of Find until a
// snapshot): ErrFormat, ErrSize or ErrGap, wrapped with the details.
func (x *Index) Apply(peer string, m *wire.Summary, now time.Time) error {
	s := x.peer(peer)
	switch {
	case m.Format != Format:
		s.ok, s.partial = false, false
		return fmt.Errorf("%w %d from %s", ErrFormat, m.Format, peer)
	case !validWords(m.Size) || m.Size > x.maxWords:
		s.ok, s.partial = false, false
		return fmt.Errorf("%w: %d words from %s (at most %d)", ErrSize, m.Size, peer, x.maxWords)
	case m.Reset:
		if uint32(len(s.words)) == m.Size {
			clear(s.words)
		} else {
			s.words = make([]uint64, m.Size)
		}
		s.epoch, s.seq, s.ok, s.partial = m.Epoch, m.Seq, false, true
	case s.words == nil || m.Epoch != s.epoch || m.Size != uint32(len(s.words)) ||
		!(s.partial && m.Seq == s.seq || s.ok && !s.partial && m.Seq == s.seq+1):
		s.ok, s.partial = false, false
		return fmt.Errorf("%w: part %d/%d from %s, holding %d/%d", ErrGap, m.Epoch, m.Seq, peer, s.epoch, s.seq)
	}
	for i, w := range m.Words {
		if w >= uint32(len(s.words)) { // wire refuses it; a hand-built part might not
			s.ok, s.partial = false, false
			return fmt.Errorf("%w: word %d of %d from %s", ErrSize, w, len(s.words), peer)
		}
		s.words[w] = m.Values[i]
	}
	s.seq = m.Seq
	if m.Last { // a whole snapshot, or a whole delta on top of one
		s.ok, s.partial, s.updated = true, false, now
	} else {
		s.partial = true
	}
	return nil
}

func (x *Index) peer(id string) *peerSummary {
	if i, ok := x.byID[id]; ok {
		return x.peers[i]
	}
	s := &peerSummary{id: id}
	x.byID[id] = len(x.peers)
	x.peers = append(x.peers, s)
	return s
}

// Remove forgets peer (its session ended, it left the deployment).
func (x *Index) Remove(peer string) {
	i, ok := x.byID[peer]
	if !ok {
		return
	}
	last := len(x.peers) - 1
	x.peers[i] = x.peers[last]
	x.byID[x.peers[i].id] = i
	x.peers = x.peers[:last]
	delete(x.byID, peer)
}

// Len is the number of peers held (usable or not).
func (x *Index) Len() int { return len(x.peers) }

// Bytes is the memory the peers' filters hold.
func (x *Index) Bytes() int {
	n := 0
	for _, s := range x.peers {
		n += 8*cap(s.words) + len(s.id) + 96
	}
	return n
}

// Query is one question to Find.
type Query struct {
	Keys []wire.Key // a request's block keys, in order
	// From is how many of Keys this side holds already: a peer must
	// probably hold a longer prefix to be worth asking.
	From   int
	Now    time.Time
	MaxAge time.Duration // a summary last updated longer ago is not used; 0: no bound
	// Eligible, when set, refuses peers that must not be asked (a suspect
	// or ejected failure domain: internal/health).
	Eligible func(peer string) bool
	// Load, when set, ranks peers holding equally long prefixes: the
	// lowest wins.
	Load func(peer string) int
	// Start rotates the scan, so that ties of equal load spread over the
	// peers (a hash of the request id, say).
	Start uint64
}

// Candidate is a peer and the prefix of Query.Keys it probably holds.
type Candidate struct {
	Peer   string
	Blocks int
}

// Find returns the peer that probably holds the longest prefix of q.Keys
// longer than q.From, the least loaded among equals; ok is false when no
// usable peer probably holds more than q.From keys. A peer that cannot beat
// the best so far costs one filter probe, so that a request whose prefix
// nobody holds costs one probe per peer.
func (x *Index) Find(q Query) (best Candidate, ok bool) {
	n := len(q.Keys)
	if n == 0 || q.From >= n || len(x.peers) == 0 {
		return Candidate{}, false
	}
	bestLen, bestLoad := q.From, 0
	ps := &x.probes
	ps.reset(q.Keys)
	start := int(q.Start % uint64(len(x.peers)))
	for j := range x.peers {
		s := x.peers[(start+j)%len(x.peers)]
		if !x.usable(s, q) {
			continue
		}
		var l int
		switch {
		case bestLen < n && ps.has(s, bestLen):
			// It may beat the best: check the prefix below and the next
			// few keys (one key's false positive must not make a peer
			// worth asking), then gallop.
			need := min(max(q.From+MinRun-bestLen, 1), n-bestLen)
			if !ps.checkpoints(s, bestLen) || !ps.runOf(s, bestLen, need) {
				continue
			}
			l = ps.gallop(s, bestLen)
		case ok && ps.has(s, bestLen-1) && ps.checkpoints(s, bestLen-1):
			l = bestLen // a tie with the best
		default:
			continue
		}
		if q.Eligible != nil && !q.Eligible(s.id) {
			continue
		}
		load := 0
		if q.Load != nil {
			load = q.Load(s.id)
		}
		if l > bestLen || load < bestLoad {
			best, bestLen, bestLoad, ok = Candidate{Peer: s.id, Blocks: l}, l, load, true
		}
	}
	return best, ok
}

// Prefixes returns, for every usable peer that probably holds at least one
// of keys, the prefix it probably holds: what a router asks.
func (x *Index) Prefixes(q Query) []Candidate {
	var out []Candidate
	ps := &x.probes
	ps.reset(q.Keys)
	for _, s := range x.peers {
		if !x.usable(s, q) || len(q.Keys) == 0 || !ps.has(s, 0) {
			continue
		}
		if q.Eligible != nil && !q.Eligible(s.id) {
			continue
		}
		out = append(out, Candidate{Peer: s.id, Blocks: ps.gallop(s, 0)})
	}
	return out
}

func (x *Index) usable(s *peerSummary, q Query) bool {
	return s.ok && (q.MaxAge == 0 || q.Now.Sub(s.updated) <= q.MaxAge)
}

// MinRun is how many keys in a row past Query.From a peer's summary must
// hold for Find to name it (fewer where the request ends sooner): one
// key's false positive (about 1.6e-5 a full filter) must not send a
// request to ask, and a peer holding fewer than three blocks of a prefix
// is not worth a round trip anyway.
const MinRun = 3

// runOf reports whether s probably holds keys[from:from+n].
func (ps *probes) runOf(s *peerSummary, from, n int) bool {
	for i := from; i < from+n; i++ {
		if !ps.has(s, i) {
			return false
		}
	}
	return true
}

// checkpoints reports whether s probably holds keys[0:m]: it probes keys
// m-1, (m-1)/2, ... 0, not all m. Caches hold prefixes (a block is stored
// after the blocks before it and, chained, is useless without them), so a
// hole is rare; the peer's lookup answer finds it if there is one.
func (ps *probes) checkpoints(s *peerSummary, m int) bool {
	for i := m - 1; i >= 0; i = (i+1)/2 - 1 {
		if !ps.has(s, i) {
			return false
		}
	}
	return true
}

// gallop returns the probable prefix length of keys in s, given that s
// holds keys[0:from+1) (or from is 0): exponential steps, then a binary
// search, assuming held keys form a prefix.
func (ps *probes) gallop(s *peerSummary, from int) int {
	lo := from // keys[lo] held (or lo == 0 and unknown)
	if !ps.has(s, lo) {
		return lo
	}
	hi := len(ps.keys) // first index known (or assumed) not held
	for step := 1; lo+step < len(ps.keys); step *= 2 {
		if !ps.has(s, lo+step) {
			hi = lo + step
			break
		}
		lo += step
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if ps.has(s, mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo + 1
}

// Peers lists the peers held, in no particular order.
func (x *Index) Peers() []string {
	out := make([]string, len(x.peers))
	for i, s := range x.peers {
		out[i] = s.id
	}
	return out
}

// Snapshot returns peer's summary as a snapshot (a reset, then its
// non-zero words) at its epoch and sequence number, for a new watcher of
// the index; nil when the peer's summary is not usable.
func (x *Index) Snapshot(peer string) []wire.Summary {
	i, ok := x.byID[peer]
	if !ok || !x.peers[i].ok || x.peers[i].partial {
		return nil
	}
	s := x.peers[i]
	var words []uint32
	var values []uint64
	for w, v := range s.words {
		if v != 0 {
			words, values = append(words, uint32(w)), append(values, v)
		}
	}
	return splitParts(s.epoch, s.seq, uint32(len(s.words)), true, words, values)
}
