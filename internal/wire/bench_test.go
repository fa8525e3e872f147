package wire

import (
	"fmt"
	"testing"
)

func BenchmarkAppendChunkHeader(b *testing.B) {
	buf := make([]byte, 0, ChunkHeaderLen)
	c := &Chunk{Job: 1, Block: 2, Offset: 4096, Len: 4096, CRC: 0xdeadbeef}
	b.SetBytes(ChunkHeaderLen)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendChunkHeader(buf[:0], c)
	}
}

// BenchmarkReaderChunk reads header+payload frames from memory; the
// source's copy stands in for the kernel's.
func BenchmarkReaderChunk(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("payload=%dKiB", size>>10), func(b *testing.B) {
			src, _ := stream(b, &Chunk{Job: 1, Len: uint32(size)})
			r := NewReader(&cycleReader{buf: src}, DefaultLimits())
			dst := make([]byte, size)
			b.SetBytes(int64(len(src)))
			b.ReportAllocs()
			for b.Loop() {
				m, err := r.Next()
				if err != nil {
					b.Fatal(err)
				}
				if err := r.ReadPayload(dst[:m.(*Chunk).Len]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkCRC32C(b *testing.B) {
	p := make([]byte, 64<<10)
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		CRC32C(p)
	}
}

func BenchmarkDecodeFetch(b *testing.B) {
	_, body := splitFrame(b, frame(b, &Fetch{ReqID: "req", Keys: keys(256), Slots: make([]uint32, 256)}))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(TypeFetch, body, DefaultLimits()); err != nil {
			b.Fatal(err)
		}
	}
}
