package crc32c

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// TestUpdateIsCastagnoli: every length around the fold's thresholds and
// steps, at every alignment mod 64, from several starting values.
func TestUpdateIsCastagnoli(t *testing.T) {
	t.Logf("fold: %v", haveFold)
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 70000)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	lengths := []int{0, 1, 15, 16, 255, 256, 257, 511, 512, 513, 527, 528, 767, 768, 1023, 1024, 4096, 65536, 65536 + 13}
	for range 200 {
		lengths = append(lengths, rng.IntN(len(buf)-64))
	}
	for _, n := range lengths {
		for _, off := range []int{0, 1, 7, 8, 33, 63} {
			p := buf[off : off+n]
			for _, crc := range []uint32{0, 0xffffffff, rng.Uint32()} {
				if got, want := Update(crc, p), crc32.Update(crc, castagnoli, p); got != want {
					t.Fatalf("Update(%08x, %d bytes at %d) = %08x, want %08x", crc, n, off, got, want)
				}
			}
		}
	}
	if got, want := Checksum(buf), crc32.Checksum(buf, castagnoli); got != want {
		t.Fatalf("Checksum = %08x, want %08x", got, want)
	}
}

// TestSplitUpdates: a sum taken in pieces equals the sum of the whole.
func TestSplitUpdates(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, 10000)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	want := crc32.Checksum(buf, castagnoli)
	for range 100 {
		var crc uint32
		for p := buf; len(p) > 0; {
			n := min(len(p), rng.IntN(3000))
			crc = Update(crc, p[:n])
			p = p[n:]
		}
		if crc != want {
			t.Fatalf("pieces: %08x, want %08x", crc, want)
		}
	}
}

func FuzzUpdate(f *testing.F) {
	f.Add(uint32(0), make([]byte, 600))
	f.Add(uint32(7), []byte("abc"))
	f.Fuzz(func(t *testing.T, crc uint32, p []byte) {
		if got, want := Update(crc, p), crc32.Update(crc, castagnoli, p); got != want {
			t.Fatalf("Update(%08x, %d bytes) = %08x, want %08x", crc, len(p), got, want)
		}
	})
}

// BenchmarkUpdate: this package against hash/crc32 on a 256 KiB chunk in
// cache, interleaved (run with -count).
func BenchmarkUpdate(b *testing.B) {
	p := make([]byte, 256<<10)
	for i := range p {
		p[i] = byte(i * 7)
	}
	b.Run("crc32", func(b *testing.B) {
		b.SetBytes(int64(len(p)))
		for b.Loop() {
			crc32.Update(0, castagnoli, p)
		}
	})
	b.Run("crc32c", func(b *testing.B) {
		b.SetBytes(int64(len(p)))
		for b.Loop() {
			Update(0, p)
		}
	})
}
