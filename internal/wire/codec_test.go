package wire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	seen := map[Type]bool{}
	for i, m := range samples() {
		t.Run(fmt.Sprintf("%d-%s", i, m.Type()), func(t *testing.T) {
			seen[m.Type()] = true
			b := frame(t, m)
			typ, body := splitFrame(t, b)
			if typ != m.Type() {
				t.Fatalf("type byte %v, want %v", typ, m.Type())
			}
			got, err := Decode(typ, body, DefaultLimits())
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, m) {
				t.Fatalf("Decode = %+v, want %+v", got, m)
			}
			// Appending to a non-empty dst leaves dst's bytes alone.
			prefix := []byte("prefix")
			b2, err := Append(prefix, m)
			if err != nil || !bytes.Equal(b2[:len(prefix)], prefix) || !bytes.Equal(b2[len(prefix):], b) {
				t.Fatalf("Append to non-empty dst: %v", err)
			}
		})
	}
	for typ := TypeInvalid + 1; typ < typeEnd; typ++ {
		if !seen[typ] {
			t.Errorf("no sample of %v", typ)
		}
	}
}

// TestGolden pins the exact bytes of a few frames, so that the encoding
// cannot drift without a test (and a Version bump) saying so.
func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		m   Message
		hex string
	}{
		{&Ping{Seq: 0x0102030405060708}, "0000000a 05 03 0102030405060708"},
		{&Chunk{Job: 7, Block: 2, Offset: 0x1000, Len: 0x800, CRC: 0xdeadbeef},
			"0000001a 05 0d 0000000000000007 00000002 00001000 00000800 deadbeef"},
		{&Hello{Version: 3, PeerID: "a:1", Incarnation: 2, BlockBytes: 0x10000, Fingerprint: "f", MaxInflight: 4, MaxFrame: 0x400000, Attempt: 9,
			Secret: [SecretSize]byte{0: 0xaa, 15: 0xbb}},
			"00000037 05 01 03 03613a31 0000000000000002 00 00010000 0166 00 00000004 00400000 0000000000000009 aa0000000000000000000000000000bb"},
		{&DataAttach{PeerID: "a:1", Incarnation: 2, Attempt: 9, MAC: [SecretSize]byte{0: 0xcc, 15: 0xdd}},
			"00000026 05 0c 03613a31 0000000000000002 0000000000000009 cc0000000000000000000000000000dd"},
		{&LookupResp{ReqID: "r", Round: 3, Keys: []Key{key(0), key(0x10)}, Hits: []bool{false, true}},
			"0000002f 05 06 0172 0000000000000003 02 000102030405060708090a0b0c0d0e0f 101112131415161718191a1b1c1d1e1f 02 02"},
		{&Fetch{Round: 1, Job: 2, Keys: []Key{key(0)}, Slots: []uint32{0x01020304}},
			"00000029 05 07 00 0000000000000001 0000000000000002 01 000102030405060708090a0b0c0d0e0f 01 01020304"},
		{&LookupPending{ReqID: "r", Round: 3}, "0000000c 05 14 0172 0000000000000003"},
		{&Goodbye{Reason: GoodbyeShutdown, Detail: strings.Repeat("x", 200)},
			"000000cd 05 0b 02 c801" + strings.Repeat("78", 200)},
	} {
		want, err := hex.DecodeString(strings.ReplaceAll(tc.hex, " ", ""))
		if err != nil {
			t.Fatal(err)
		}
		if got := frame(t, tc.m); !bytes.Equal(got, want) {
			t.Errorf("Append(%T):\n got %x\nwant %x", tc.m, got, want)
		}
	}
}

func TestAppendChunkHeaderMatchesAppend(t *testing.T) {
	c := &Chunk{Job: 1<<64 - 1, Block: 3, Offset: 8, Len: 16, CRC: 0x01020304}
	got := AppendChunkHeader(nil, c)
	if len(got) != ChunkHeaderLen || !bytes.Equal(got, frame(t, c)) {
		t.Fatalf("AppendChunkHeader = %x, Append = %x", got, frame(t, c))
	}
}

func TestAppendChunkHeaderPanicsOverLimit(t *testing.T) {
	defer func() {
		if err, _ := recover().(error); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("recovered %v, want an ErrTooLarge", err)
		}
	}()
	AppendChunkHeader(nil, &Chunk{Len: DefaultLimits().MaxChunk + 1})
}

type alien struct{}

func (alien) Type() Type { return TypePing }

func TestAppendRefuses(t *testing.T) {
	lim := DefaultLimits()
	long := strings.Repeat("s", int(lim.MaxString)+1)
	for _, tc := range []struct {
		m     Message
		want  error
		field string
	}{
		{nil, ErrUnknownType, ""},
		{alien{}, ErrUnknownType, "alien"},
		{&Hello{PeerID: long, BlockBytes: 1}, ErrTooLarge, "Hello.PeerID"},
		{&Hello{}, ErrMalformed, "Hello.BlockBytes"},
		{&Hello{BlockBytes: lim.MaxBlockSize + 1}, ErrTooLarge, "Hello.BlockBytes"},
		{&Lookup{Keys: keys(int(lim.MaxKeys) + 1)}, ErrTooLarge, "Lookup.Keys"},
		{&LookupResp{Keys: keys(2), Hits: []bool{true}}, ErrMalformed, "LookupResp.Hits"},
		{&Fetch{Keys: keys(1)}, ErrMalformed, "Fetch.Slots"},
		{&Fetch{Keys: keys(int(lim.MaxKeys) + 1), Slots: make([]uint32, lim.MaxKeys+1)}, ErrTooLarge, "Fetch.Keys"},
		{&Goodbye{Detail: long}, ErrTooLarge, "Goodbye.Detail"},
		{&Error{Msg: long}, ErrTooLarge, "Error.Msg"},
		{&Abort{ReqID: long}, ErrTooLarge, "Abort.ReqID"},
		{&Chunk{Len: lim.MaxChunk + 1}, ErrTooLarge, "Chunk.Len"},
		{&Chunk{Offset: lim.MaxBlockSize, Len: 1}, ErrTooLarge, "Chunk.Offset"},
	} {
		dst := []byte("keep")
		got, err := Append(dst, tc.m)
		if !errors.Is(err, tc.want) || !strings.Contains(fmt.Sprint(err), tc.field) {
			t.Errorf("Append(%T): %v, want %v naming %q", tc.m, err, tc.want, tc.field)
		}
		if string(got) != "keep" {
			t.Errorf("Append(%T) on error returned %q, want dst unchanged", tc.m, got)
		}
	}
}

func TestDecodeRefuses(t *testing.T) {
	lim := DefaultLimits()
	h := func(s string) []byte {
		b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	body := func(m Message) []byte { _, b := splitFrame(t, frame(t, m)); return b }
	ping := body(&Ping{Seq: 1})
	hello := body(&Hello{BlockBytes: 1})
	k0 := key(0)
	for _, tc := range []struct {
		name  string
		typ   Type
		body  []byte
		want  error
		field string
	}{
		{"invalid type", TypeInvalid, nil, ErrUnknownType, "type 0"},
		{"type past end", typeEnd, nil, ErrUnknownType, "type 21"},
		{"truncated", TypePing, ping[:7], ErrMalformed, "Ping.Seq"},
		{"empty", TypeDone, nil, ErrMalformed, "Done.Job"},
		{"trailing", TypePing, append(ping, 0), ErrMalformed, "Ping: 1 trailing"},
		{"bool 2", TypeProgress, h("0000000000000001 0000000000000002 02"), ErrMalformed, "Progress.Queued"},
		{"non-minimal uvarint", TypeGoodbye, h("00 8000"), ErrMalformed, "Goodbye.Detail"},
		{"uvarint overflow", TypeGoodbye, h("00 ffffffffffffffffff02"), ErrMalformed, "Goodbye.Detail"},
		{"uvarint cut", TypeGoodbye, h("00 80"), ErrMalformed, "Goodbye.Detail"},
		{"string over limit", TypeHelloAck, h("8120"), ErrTooLarge, "HelloAck.PeerID"}, // 4097
		{"string past body", TypeHelloAck, h("05 6162"), ErrMalformed, "HelloAck.PeerID"},
		{"keys over limit", TypeLookup, h("00 0000000000000000 818004"), ErrTooLarge, "Lookup.Keys"},
		{"keys past body", TypeLookup, h("00 0000000000000000 02") /* no key bytes */, ErrMalformed, "Lookup.Keys"},
		{"hits padding", TypeLookupResp, append(h("00 0000000000000000 01"), append(k0[:], 1, 0x03)...), ErrMalformed, "LookupResp.Hits"},
		{"hits count", TypeLookupResp, append(h("00 0000000000000000 01"), append(k0[:], 2, 0x01)...), ErrMalformed, "LookupResp.Hits"},
		{"slots count", TypeFetch, append(h("00 0000000000000000 0000000000000000 01"), append(k0[:], 0)...), ErrMalformed, "Fetch.Slots"},
		{"block bytes zero", TypeHello, append(hello[:11:11], append([]byte{0, 0, 0, 0}, hello[15:]...)...), ErrMalformed, "Hello.BlockBytes"},
		{"block bytes over", TypeHello, append(hello[:11:11], append([]byte{0xff, 0xff, 0xff, 0xff}, hello[15:]...)...), ErrTooLarge, "Hello.BlockBytes"},
		{"chunk len", TypeChunk, h("0000000000000000 00000000 00000000 00400001 00000000"), ErrTooLarge, "Chunk.Len"},
		{"chunk end", TypeChunk, h("0000000000000000 00000000 0ffffffc 00000005 00000000"), ErrTooLarge, "Chunk.Offset"},
		{"frame over limit", TypeGoodbye, make([]byte, lim.MaxFrame-frameHeader+1), ErrTooLarge, "frame length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Decode(tc.typ, tc.body, lim)
			if !errors.Is(err, tc.want) || !strings.Contains(fmt.Sprint(err), tc.field) || m != nil {
				t.Fatalf("Decode = %v, %v; want nil, %v naming %q", m, err, tc.want, tc.field)
			}
		})
	}
}

// TestDecodeCountsBoundedByBody checks that a count within MaxKeys but far
// beyond the body fails before allocating for it.
func TestDecodeCountsBoundedByBody(t *testing.T) {
	lim := DefaultLimits()
	// Lookup: empty ReqID, Round 0, then MaxKeys (65536 = 0x80 0x80 0x04) keys, none present.
	body := []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80, 0x80, 0x04}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const runs = 100
	for range runs {
		if _, err := Decode(TypeLookup, body, lim); !errors.Is(err, ErrMalformed) {
			t.Fatalf("Decode: %v, want ErrMalformed", err)
		}
	}
	runtime.ReadMemStats(&after)
	// Allocating the keys would cost 1 MiB a run; the errors cost a few hundred bytes.
	if perRun := (after.TotalAlloc - before.TotalAlloc) / runs; perRun > 4096 {
		t.Fatalf("%d bytes allocated per refused decode", perRun)
	}
}

func TestCRC32C(t *testing.T) {
	// The standard CRC-32C check value (RFC 3720 appendix B.4 uses the same polynomial).
	if got := CRC32C([]byte("123456789")); got != 0xe3069283 {
		t.Fatalf("CRC32C = %#x, want 0xe3069283", got)
	}
}
