package summary

import (
	"fmt"
	"slices"

	"github.com/kvp2p/kvp2p/internal/wire"
)

// Producer keeps the summary of one node's tier: which key each chunk
// holds, the filter built from them, and the filter as last published
// (what receivers hold), from which it makes updates. Memory: 21 bytes a
// word (the filter twice, a list head, a dirty flag) plus 16 bytes a
// probe (Probes a chunk).
//
// A probe is one of a chunk's key's words and the bits it sets there:
// probe c*Probes+i is chunk c's i-th. Each word lists the probes that set
// bits in it, so that a removal recomputes the word from the others.
type Producer struct {
	epoch, seq uint64
	words      []uint64 // the filter now
	sent       []uint64 // the filter as of seq: what receivers hold
	head       []int32  // per word: its first probe, -1 if none
	next       []int32  // per probe: the next probe in its word's list
	word       []uint32 // per probe: its word
	mask       []uint64 // per probe: its bits; 0: the chunk holds no key
	dirty      []uint32 // words changed since the last Flush
	isDirty    []bool
	stores     uint64 // keys stored, for the status page
	removals   uint64 // keys removed (replaced or reported)
}

// NewProducer makes the producer for a tier of chunks chunks. epoch must
// differ from any earlier producer of the same node (a random number, or
// the node's incarnation), so that receivers never mix two producers'
// sequences.
func NewProducer(chunks int, epoch uint64) (*Producer, error) {
	if chunks <= 0 || chunks > 1<<31-1 {
		return nil, fmt.Errorf("summary: %d chunks", chunks)
	}
	n := SizeWords(chunks)
	p := &Producer{
		epoch: epoch,
		words: make([]uint64, n), sent: make([]uint64, n),
		head: make([]int32, n), next: make([]int32, chunks*Probes),
		word: make([]uint32, chunks*Probes), mask: make([]uint64, chunks*Probes),
		isDirty: make([]bool, n),
	}
	for i := range p.head {
		p.head[i] = -1
	}
	return p, nil
}

// Chunks is the tier's size in chunks.
func (p *Producer) Chunks() int { return len(p.mask) / Probes }

// Size is the filter's size in words.
func (p *Producer) Size() uint32 { return uint32(len(p.words)) }

// Store records that chunk now holds key k: whatever the chunk held before
// is gone (the engine reuses a chunk only for a new key, so a store is also
// how an eviction is learnt).
func (p *Producer) Store(chunk int, k wire.Key) error {
	if chunk < 0 || chunk >= p.Chunks() {
		return fmt.Errorf("summary: chunk %d of %d", chunk, p.Chunks())
	}
	pos := Position(k, uint32(len(p.words)))
	first := chunk * Probes
	if p.mask[first] != 0 {
		if p.holds(first, pos) {
			return nil // the same key again (its bits are all this side knows of it)
		}
		p.unlink(chunk)
		p.removals++
	}
	for i := range Probes {
		w, pr := pos.Word[i], first+i
		p.word[pr], p.mask[pr] = w, pos.Mask[i]
		p.next[pr] = p.head[w]
		p.head[w] = int32(pr)
		p.words[w] |= pos.Mask[i]
		p.touch(w)
	}
	p.stores++
	return nil
}

// holds reports whether the probes from first are pos's.
func (p *Producer) holds(first int, pos Probe) bool {
	for i := range Probes {
		if p.word[first+i] != pos.Word[i] || p.mask[first+i] != pos.Mask[i] {
			return false
		}
	}
	return true
}

// Remove records that chunk holds no key any more.
func (p *Producer) Remove(chunk int) {
	if chunk < 0 || chunk >= p.Chunks() || p.mask[chunk*Probes] == 0 {
		return
	}
	p.unlink(chunk)
	p.removals++
}

// unlink takes chunk's probes out of their words' lists and recomputes
// each word from the probes left in it (a few: 64*Probes/BitsPerKey a
// word on average).
func (p *Producer) unlink(chunk int) {
	for pr := chunk * Probes; pr < (chunk+1)*Probes; pr++ {
		w := p.word[pr]
		var v uint64
		for c, prev := p.head[w], int32(-1); c >= 0; c = p.next[c] {
			if int(c) == pr {
				if prev < 0 {
					p.head[w] = p.next[c]
				} else {
					p.next[prev] = p.next[c]
				}
				continue
			}
			v |= p.mask[c] // a probe of chunk not unlinked yet (same word) still counts: the next pass drops it
			prev = c
		}
		p.mask[pr] = 0
		p.words[w] = v
		p.touch(w)
	}
}

func (p *Producer) touch(w uint32) {
	if !p.isDirty[w] {
		p.isDirty[w] = true
		p.dirty = append(p.dirty, w)
	}
}

// Flush publishes what changed since the last Flush as the delta Seq+1:
// the words whose value differs from the published one. It always returns
// at least one part (an empty delta proves the summary is fresh).
func (p *Producer) Flush() []wire.Summary {
	slices.Sort(p.dirty)
	var words []uint32
	var values []uint64
	for _, w := range p.dirty {
		p.isDirty[w] = false
		if p.words[w] != p.sent[w] {
			p.sent[w] = p.words[w]
			words, values = append(words, w), append(values, p.words[w])
		}
	}
	p.dirty = p.dirty[:0]
	p.seq++
	return p.parts(false, words, values)
}

// Snapshot is the published summary whole (Reset, then its non-zero
// words), at the current Seq: what a new receiver gets before the next
// Flush's delta.
func (p *Producer) Snapshot() []wire.Summary {
	var words []uint32
	var values []uint64
	for w, v := range p.sent {
		if v != 0 {
			words, values = append(words, uint32(w)), append(values, v)
		}
	}
	return p.parts(true, words, values)
}

func (p *Producer) parts(reset bool, words []uint32, values []uint64) []wire.Summary {
	return splitParts(p.epoch, p.seq, uint32(len(p.words)), reset, words, values)
}

// splitParts splits an update into wire parts of at most MaxEntries words.
func splitParts(epoch, seq uint64, size uint32, reset bool, words []uint32, values []uint64) []wire.Summary {
	n := max(1, (len(words)+MaxEntries-1)/MaxEntries)
	out := make([]wire.Summary, n)
	for i := range out {
		lo, hi := i*MaxEntries, min((i+1)*MaxEntries, len(words))
		out[i] = wire.Summary{Format: Format, Reset: reset && i == 0, Last: i == n-1,
			Epoch: epoch, Seq: seq, Size: size}
		if lo < hi {
			out[i].Words, out[i].Values = words[lo:hi:hi], values[lo:hi:hi]
		}
	}
	return out
}

// Has reports whether the tier probably holds k (the filter now, not the
// published one).
func (p *Producer) Has(k wire.Key) bool { return Has(p.words, k) }

// ProducerStats are a producer's counts, for the status page.
type ProducerStats struct {
	Epoch, Seq       uint64
	Words            uint32
	Stores, Removals uint64
	Bytes            int // memory held
}

// Stats returns the producer's counts.
func (p *Producer) Stats() ProducerStats {
	return ProducerStats{Epoch: p.epoch, Seq: p.seq, Words: uint32(len(p.words)),
		Stores: p.stores, Removals: p.removals,
		Bytes: len(p.words)*(8+8+4+1) + len(p.mask)*(4+4+8) + cap(p.dirty)*4}
}
