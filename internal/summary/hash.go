package summary

import (
	"encoding/binary"
	"math/bits"

	"github.com/kvp2p/kvp2p/internal/wire"
)

const (
	// Format is the summary layout this package writes and reads
	// (wire.Summary.Format): the hash below, Hashes bits in one word.
	Format uint8 = 1
	// Hashes is the number of bits a key sets in its word.
	Hashes = 6
	// BitsPerKey is the filter's size per chunk of the producer's tier:
	// with one-word blocks and 6 bits a key, false positives
	// when every chunk holds a key: 0.4% (TestFalsePositiveRate measures it).
	BitsPerKey = 16
	// MaxWords bounds one peer's filter (8 MiB: a tier of 4M chunks).
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

// Position is where key k lives in a filter of words words (a power of
// two): the word's index and the Hashes bits it sets there. The Python
// side computes the same (docs/find.md gives the same steps and test
// vectors from TestPositionVectors):
//
//	a = mix(LE64(k[0:8]) ^ seedA), b = mix(LE64(k[8:16]) ^ a ^ seedB)
//	word = a & (words-1)
//	bit i (i = 0..5) = (b >> (6*i)) & 63
func Position(k wire.Key, words uint32) (word uint32, mask uint64) {
	a := Mix(binary.LittleEndian.Uint64(k[0:8]) ^ seedA)
	b := Mix(binary.LittleEndian.Uint64(k[8:16]) ^ a ^ seedB)
	for i := range Hashes {
		mask |= 1 << ((b >> (6 * i)) & 63)
	}
	return uint32(a & uint64(words-1)), mask
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
