package wire

import (
	"encoding/binary"
	"strings"
	"testing"
)

// key returns a key whose bytes are seed, seed+1, ...
func key(seed byte) Key {
	var k Key
	for i := range k {
		k[i] = seed + byte(i)
	}
	return k
}

func keys(n int) []Key {
	ks := make([]Key, n)
	for i := range ks {
		binary.BigEndian.PutUint32(ks[i][:], uint32(i))
		ks[i][15] = byte(i)
	}
	return ks
}

func pattern[T any](n int, f func(i int) T) []T {
	vs := make([]T, n)
	for i := range vs {
		vs[i] = f(i)
	}
	return vs
}

// samples holds at least one message of every type, with the edge cases:
// zero values, empty lists (nil, as they decode), bitmaps that do and do not
// fill their last byte, and every length at its DefaultLimits maximum.
func samples() []Message {
	lim := DefaultLimits()
	maxStr := strings.Repeat("s", int(lim.MaxString))
	maxKeys := int(lim.MaxKeys)
	return []Message{
		&Hello{Version: Version, PeerID: "10.0.0.1:7000", Incarnation: 1<<64 - 1, Domain: "pod-a",
			BlockBytes: 2 << 20, Fingerprint: "bf16/32x128", HashSeed: "seed", MaxInflight: 64, MaxFrame: 4 << 20, Attempt: 1<<64 - 1,
			Secret: [SecretSize]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0xff}},
		&Hello{BlockBytes: 1},
		&Hello{Version: 9, PeerID: maxStr, Domain: maxStr, BlockBytes: lim.MaxBlockSize, Fingerprint: maxStr, HashSeed: maxStr},
		&HelloAck{}, &HelloAck{PeerID: "10.0.0.2:7001", Incarnation: 42},
		&Ping{}, &Ping{Seq: 1<<64 - 1}, &Pong{Seq: 7},
		&Lookup{}, &Lookup{ReqID: "req-1", Round: 2, Keys: []Key{key(0), key(16)}},
		&Lookup{ReqID: maxStr, Round: 1<<64 - 1, Keys: keys(maxKeys)},
		&LookupResp{ReqID: "req-1"},
		&LookupResp{ReqID: "req-1", Round: 1, Keys: []Key{key(1)}, Hits: []bool{true}},
		&LookupResp{Keys: keys(8), Hits: pattern(8, func(i int) bool { return i%3 == 0 })},
		&LookupResp{Keys: keys(9), Hits: pattern(9, func(i int) bool { return true })},
		&LookupResp{ReqID: maxStr, Keys: keys(maxKeys), Hits: pattern(maxKeys, func(i int) bool { return i%7 < 3 })},
		&Fetch{ReqID: "req-1", Round: 3},
		&Fetch{ReqID: "req-1", Round: 3, Job: 9, Keys: []Key{key(2), key(3)}, Slots: []uint32{0, 1<<32 - 1}},
		&Fetch{Keys: keys(maxKeys), Slots: pattern(maxKeys, func(i int) uint32 { return uint32(i * 3) })},
		&TransferDone{}, &TransferDone{ReqID: "r", Round: 1, Job: 2, Success: true, Bytes: 1 << 40},
		&Abort{}, &Abort{ReqID: "r", Round: 1, Job: 2},
		&AbortAck{}, &AbortAck{ReqID: "r", Round: 1, Job: 2},
		&Goodbye{}, &Goodbye{Reason: GoodbyeTooManyPeers, Detail: "full"}, &Goodbye{Reason: 200, Detail: maxStr},
		&DataAttach{}, &DataAttach{PeerID: "10.0.0.1:7000", Incarnation: 5, Attempt: 6, MAC: [SecretSize]byte{0xff, 15: 1}},
		&Chunk{}, &Chunk{Job: 1, Block: 2, Offset: 4096, Len: 4096, CRC: 0xdeadbeef},
		&Chunk{Job: 1<<64 - 1, Block: 1<<32 - 1, Offset: lim.MaxBlockSize - lim.MaxChunk, Len: lim.MaxChunk, CRC: 1<<32 - 1},
		&Progress{}, &Progress{Job: 3, Bytes: 1 << 33, Queued: true},
		&Done{}, &Done{Job: 3, Bytes: 1 << 33},
		&Error{}, &Error{Job: 3, Code: ErrSlotGone, Msg: "slot 7 evicted"}, &Error{Code: 255, Msg: maxStr},
		&Probe{}, &Probe{Seq: 12}, &ProbeAck{Seq: 12},
		&Summary{Format: 1, Size: 1},
		&LookupPending{}, &LookupPending{ReqID: "req-1", Round: 2}, &LookupPending{ReqID: maxStr, Round: 1<<64 - 1},
		&Summary{Format: 1, Reset: true, Last: true, Epoch: 3, Seq: 9, Size: 1 << 10, Words: []uint32{0, 7, 1023}, Values: []uint64{1, 1 << 63, 0xf0}},
	}
}

// frame encodes m, failing the test on error.
func frame(t testing.TB, m Message) []byte {
	t.Helper()
	b, err := Append(nil, m)
	if err != nil {
		t.Fatalf("Append(%T): %v", m, err)
	}
	return b
}

// splitFrame checks a frame's header and returns its type and body.
func splitFrame(t testing.TB, b []byte) (Type, []byte) {
	t.Helper()
	if len(b) < frameHeader {
		t.Fatalf("frame of %d bytes", len(b))
	}
	if n := binary.BigEndian.Uint32(b); int(n) != len(b)-lenPrefix {
		t.Fatalf("length prefix %d, frame has %d bytes after it", n, len(b)-lenPrefix)
	}
	if b[4] != Version {
		t.Fatalf("version byte %d", b[4])
	}
	return Type(b[5]), b[frameHeader:]
}

// cycleReader serves buf over and over without allocating, for the
// steady-state allocation test and the benchmarks.
type cycleReader struct {
	buf []byte
	off int
}

func (c *cycleReader) Read(p []byte) (int, error) {
	n := copy(p, c.buf[c.off:])
	c.off = (c.off + n) % len(c.buf)
	return n, nil
}

// tinySizes make a Reader's buffer grow and shrink with frames of a few
// dozen bytes.
var tinySizes = bufSizes{idle: 16, first: 32, stream: 64}

// maxBuf is the largest buffer a Reader with sizes sz may hold under lim.
func maxBuf(lim Limits, sz bufSizes) int { return max(int(lim.MaxFrame), sz.stream) }
