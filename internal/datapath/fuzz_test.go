package datapath

import (
	"net"
	"testing"

	"github.com/kvp2p/kvp2p/internal/wire"
)

// FuzzConnReader feeds a data connection's reader any byte stream a peer
// could send while two jobs are expected: it never panics, never writes
// outside the expected slots (the arena's fences), and always ends with
// exactly one Closed event.
func FuzzConnReader(f *testing.F) {
	const bb = 1024
	block := make([]byte, bb)
	pattern(block, 1, 0)
	var seed []byte
	seed = wire.AppendChunkHeader(seed, &wire.Chunk{Job: 1, Block: 0, Len: bb, CRC: wire.CRC32C(block)})
	seed = append(seed, block...)
	seed, _ = wire.Append(seed, &wire.Progress{Job: 2, Bytes: 10})
	seed, _ = wire.Append(seed, &wire.Done{Job: 1, Bytes: bb})
	seed, _ = wire.Append(seed, &wire.Error{Job: 2, Code: wire.ErrAborted, Msg: "x"})
	seed, _ = wire.Append(seed, &wire.Probe{Seq: 3})
	f.Add(seed)
	bad := wire.AppendChunkHeader(nil, &wire.Chunk{Job: 2, Block: 1, Offset: bb - 8, Len: 16})
	f.Add(append(bad, make([]byte, 16)...))
	f.Add([]byte{0, 0, 0, 2, wire.Version, byte(wire.TypeChunk)})
	f.Fuzz(func(t *testing.T, stream []byte) {
		a, b := net.Pipe()
		p := startPeer(t, a, Config{BlockBytes: bb, ChunkBytes: 256}, 4)
		p.c.Expect(1, []uint32{0, 1})
		p.c.Expect(2, []uint32{2, 3})
		go func() {
			// Probes are answered on the same pipe: drain it.
			buf := make([]byte, 4096)
			for {
				if _, err := b.Read(buf); err != nil {
					return
				}
			}
		}()
		_, _ = b.Write(stream)
		b.Close()
		<-p.c.Done()
		p.stop(t)
	})
}
