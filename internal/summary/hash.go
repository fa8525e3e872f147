package summary

import (
	"encoding/binary"
	"math/bits"

	"github.com/kvp2p/kvp2p/internal/wire"
)

const (
	// Format is the summary layout this package writes and reads
	// (wire.Summary.Format): the hash below, Hashes bits in each of a
	// key's Probes words. Format 1 (one word, 16 bits a chunk) is no
	// longer read.
	Format uint8 = 2
	// Probes is the number of words a key sets bits in. Two independent
	// words, not one: a word's load varies from key to key (Poisson), and
	// a key whose one word is crowded is a likely false positive; two
	// words are both crowded far more rarely (docs/find.md, "Why this
	// filter").
	Probes = 2
	// Hashes is the number of bits a key sets in each of its words.
	Hashes = 6
	// BitsPerKey is the filter's size per chunk of the producer's tier:
	// with two words of 6 bits a key, false positives when every chunk
	// holds a key: 0.0016% (TestFalsePositiveRate measures it), so that
	// among 1,000 full peers' filters a key nobody holds tests present in
	// one at all 1.6% of the time.
	BitsPerKey = 32
	// MaxWords bounds one peer's filter (8 MiB: a tier of 2M chunks).
	MaxWords = 1 << 20
	// MaxEntries bounds the words in one wire.Summary part, so that a part
	// stays well within a control frame (12 bytes a word).
	MaxEntries = 16 << 10
)

// Two constants (the golden ratio's and π's first 64 bits) so that the
// all-zero key does not land on one bit of word 0.
const (
	seedA = 0x9e3779b97f4a7c15
	seedB = 0x243f6a8885a308d3
)

// Mix is splitmix64's finaliser, the mixing Position applies: keys are
// hashes already, but a key whose halves are structured (a test's, a
// counter) must still spread. The simulator makes its keys with it too.
func Mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Probe is where a key lives in a filter: Probes words, and the bits it
// sets in each.
type Probe struct {
	Word [Probes]uint32
	Mask [Probes]uint64
}

// In reports whether filter (of the size the probe was computed for)
// probably holds the key.
func (p Probe) In(filter []uint64) bool {
	for i := range Probes {
		if filter[p.Word[i]]&p.Mask[i] != p.Mask[i] {
			return false
		}
	}
	return true
}

// Position is where key k lives in a filter of words words (a power of
// two, at most 2^32). The Python side computes the same (docs/find.md
// gives the same steps and test vectors from TestPositionVectors):
//
//	a = mix(LE64(k[0:8]) ^ seedA), b = mix(LE64(k[8:16]) ^ a ^ seedB), c = mix(b ^ seedA)
//	word 0 = a & (words-1), word 1 = (a >> 32) & (words-1)
//	bits of word 0: (b >> (6*i)) & 63, of word 1: (c >> (6*i)) & 63, i = 0..5
//
// The two words may coincide (a chance of 1/words): the key is then
// tested on one word, as in Format 1.
func Position(k wire.Key, words uint32) (p Probe) {
	a := Mix(binary.LittleEndian.Uint64(k[0:8]) ^ seedA)
	b := Mix(binary.LittleEndian.Uint64(k[8:16]) ^ a ^ seedB)
	c := Mix(b ^ seedA)
	p.Word[0] = uint32(a & uint64(words-1))
	p.Word[1] = uint32((a >> 32) & uint64(words-1))
	for i := range Hashes {
		p.Mask[0] |= 1 << ((b >> (6 * i)) & 63)
		p.Mask[1] |= 1 << ((c >> (6 * i)) & 63)
	}
	return p
}

// Has reports whether filter (a power of two words) probably holds k.
func Has(filter []uint64, k wire.Key) bool {
	return Position(k, uint32(len(filter))).In(filter)
}

// SizeWords is the filter size for a tier of chunks chunks: BitsPerKey
// bits per chunk, rounded up to a power of two words, at least one, at
// most MaxWords.
func SizeWords(chunks int) uint32 {
	need := (uint64(max(chunks, 1))*BitsPerKey + 63) / 64
	w := uint64(1) << bits.Len64(need-1)
	return uint32(min(w, MaxWords))
}

// validWords reports whether n is a filter size this package accepts.
func validWords(n uint32) bool { return n != 0 && n <= MaxWords && n&(n-1) == 0 }
