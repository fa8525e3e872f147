package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

// fuzzLimits are small so that the fuzzers reach every limit quickly.
var fuzzLimits = Limits{MaxFrame: 4 << 10, MaxKeys: 64, MaxString: 64, MaxChunk: 1 << 10, MaxBlockSize: 1 << 12}

// addSampleSeeds seeds f with every sample small enough for fuzzLimits.
func addSampleSeeds(f *testing.F, add func(typ Type, body []byte, frame []byte)) {
	for _, m := range samples() {
		b := frame(f, m)
		if len(b) > 512 {
			continue
		}
		typ, body := splitFrame(f, b)
		add(typ, body, b)
	}
}

// FuzzDecode: any body of any type decodes or fails, never panics; a body
// that decodes re-encodes to the very same bytes (the encoding is canonical)
// and decodes again to an equal message.
func FuzzDecode(f *testing.F) {
	addSampleSeeds(f, func(typ Type, body, _ []byte) { f.Add(uint8(typ), body) })
	f.Add(uint8(TypeLookupResp), []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80, 0x80, 0x04})
	f.Add(uint8(200), []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, typ uint8, body []byte) {
		for _, lim := range []Limits{fuzzLimits, DefaultLimits()} {
			m, err := Decode(Type(typ), body, lim)
			if err != nil {
				if m != nil {
					t.Fatalf("Decode returned %v with error %v", m, err)
				}
				if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrUnknownType) {
					t.Fatalf("Decode error wraps no sentinel: %v", err)
				}
				continue
			}
			if m.Type() != Type(typ) {
				t.Fatalf("Decode(%v) returned a %v", Type(typ), m.Type())
			}
			b, err := Append(nil, m)
			if err != nil {
				t.Fatalf("Append of a decoded %T: %v", m, err)
			}
			typ2, body2 := splitFrame(t, b)
			if typ2 != Type(typ) || !bytes.Equal(body2, body) {
				t.Fatalf("re-encoded %v body\n %x\nwant\n %x", typ2, body2, body)
			}
			m2, err := Decode(typ2, body2, lim)
			if err != nil || !reflect.DeepEqual(m, m2) {
				t.Fatalf("second Decode = %+v, %v; want %+v", m2, err, m)
			}
		}
	})
}

// FuzzReader: any byte stream gives messages then an error, never a panic,
// never ErrUsage (the loop below uses the Reader correctly), and the Reader
// never holds a buffer larger than MaxFrame or its streaming size. It is read twice: plain, and
// with readv for every payload (src.go) returning the sizes split gives;
// the two transcripts (frames, payload bytes, final error) must be equal.
func FuzzReader(f *testing.F) {
	addSampleSeeds(f, func(_ Type, _, b []byte) { f.Add(false, []byte{1}, b) })
	chunks, _ := stream(f, &Chunk{Job: 1, Len: 100}, &Ping{}, &Chunk{Job: 2, Len: 30}, &Done{Job: 2})
	f.Add(true, []byte{7, 200, 1}, chunks)
	f.Add(false, []byte{0}, chunks)
	f.Add(false, []byte{}, header(1<<31, Version, TypeFetch))
	f.Fuzz(func(t *testing.T, tiny bool, split, data []byte) {
		size := defaultSizes
		if tiny {
			size = tinySizes // the buffer grows and shrinks every few frames
		}
		plain := readTranscript(t, newReaderSize(bytes.NewReader(data), fuzzLimits, size), size)
		br := bytes.NewReader(data)
		sizes := make([]int, len(split))
		for i, b := range split {
			sizes[i] = int(b)
		}
		r := newReaderV(br, &splitV{r: br, sizes: sizes}, fuzzLimits, size)
		r.narrowAt = 1
		if v := readTranscript(t, r, size); v != plain {
			t.Fatalf("transcripts differ:\nplain %q\nreadv %q", plain, v)
		}
		br = bytes.NewReader(data)
		r = newReaderV(br, &splitV{r: br, sizes: sizes}, fuzzLimits, size)
		r.narrowAt = 1
		if v := readTranscriptAhead(t, r, size, split); v != plain {
			t.Fatalf("transcripts differ:\nplain %q\nahead %q", plain, v)
		}
		// With a budget for the buffer above the streaming size: the same
		// frames, up to one the budget refuses; the budget is never
		// overdrawn and is all given back at Release.
		bg := NewBudget(int64(2 * size.stream))
		r = newReaderSize(bytes.NewReader(data), fuzzLimits, size)
		r.SetBudget(bg)
		v := readTranscript(t, r, size)
		if bg.Used() > bg.Limit() {
			t.Fatalf("budget used %d of %d", bg.Used(), bg.Limit())
		}
		r.Release()
		if bg.Used() != 0 {
			t.Fatalf("budget charged %d after Release", bg.Used())
		}
		if v != plain {
			// The frames before the one the budget refused must be the
			// same; that frame's own verdict may differ (the plain reader
			// reads its body and may find it malformed or of an unknown
			// type, where the budget refused to buffer it).
			i := strings.LastIndex(v, "wire: buffer of ")
			j := -1
			if i >= 0 {
				j = strings.LastIndex(v[:i], "wire: reading ")
			}
			if j < 0 || !strings.HasSuffix(v, ErrBudget.Error()) || !strings.HasPrefix(plain, v[:j]) {
				t.Fatalf("transcripts differ:\nplain  %q\nbudget %q", plain, v)
			}
		}
	})
}

// readTranscriptAhead is readTranscript with every payload read by
// ReadPayloadAhead and a guess of where the next goes, in the other of two
// areas (never overlapping the payload being read): choices picks the
// guesses (none to four, one after the other), and whether the next payload goes where it was guessed (a hit, or
// a shorter or longer payload from the same place), elsewhere in that area
// (a miss that may overlap what was read ahead) or in the other area.
func readTranscriptAhead(t *testing.T, r *Reader, sz bufSizes, choices []byte) string {
	var out []byte
	n := int(fuzzLimits.MaxChunk)
	areas := [2][]byte{make([]byte, 5*n), make([]byte, 5*n)}
	cur, goff := 0, 0 // the area the next payload goes to, and the guess's offset in it
	choice := func(i int) int {
		if len(choices) == 0 {
			return 0
		}
		return int(choices[i%len(choices)])
	}
	for i := 0; ; i++ {
		m, err := r.Next()
		if len(r.b.buf) > maxBuf(fuzzLimits, sz)+n {
			t.Fatalf("buffer grew to %d, MaxFrame %d, MaxChunk %d, sizes %+v", len(r.b.buf), fuzzLimits.MaxFrame, n, sz)
		}
		if err != nil {
			return string(append(out, err.Error()...))
		}
		b, _ := Append(nil, m)
		out = append(out, b...)
		c, ok := m.(*Chunk)
		if ok && i%2 == 1 {
			if err := r.DiscardPayload(); err != nil {
				return string(append(out, err.Error()...))
			}
		}
		if !ok || i%2 == 1 {
			// The areas are ours again: what was read ahead must be
			// back in the Reader, so scribbling over them changes nothing.
			scribble(areas[0])
			scribble(areas[1])
			continue
		}
		off := goff // where it was guessed
		switch choice(i) % 3 {
		case 1:
			off = choice(i+1) % n // elsewhere in the guessed area
		case 2:
			cur = 1 - cur // the other area
		}
		dst := areas[cur][off : off+int(c.Len)]
		goff = choice(i+2) % n
		var next [][]byte // 0 to 4 guesses, one after the other
		for k, at := 0, goff; k < choice(i+3)%5; k++ {
			l := choice(i+4+k)%n + 1
			next = append(next, areas[1-cur][at:at+l])
			at += l
		}
		if err := r.ReadPayloadAhead(dst, next); err != nil {
			if errors.Is(err, ErrUsage) {
				t.Fatalf("frame %d payload: %v", i, err)
			}
			return string(append(out, err.Error()...))
		}
		out = append(out, dst...)
		cur = 1 - cur
	}
}

// readTranscript reads r to its error, checking it as FuzzReader says,
// and returns what it read: each frame re-encoded, each payload read
// (every other chunk's is discarded), and the error.
func readTranscript(t *testing.T, r *Reader, sz bufSizes) string {
	var out []byte
	dst := make([]byte, fuzzLimits.MaxChunk)
	for i := 0; ; i++ {
		m, err := r.Next()
		if len(r.b.buf) > maxBuf(fuzzLimits, sz) {
			t.Fatalf("buffer grew to %d, MaxFrame %d, sizes %+v", len(r.b.buf), fuzzLimits.MaxFrame, sz)
		}
		if err != nil {
			if errors.Is(err, ErrUsage) {
				t.Fatalf("frame %d: %v", i, err)
			}
			if err != io.EOF && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrBudget) &&
				!errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrUnknownType) && !errors.Is(err, ErrVersion) {
				t.Fatalf("frame %d: error wraps no sentinel: %v", i, err)
			}
			return string(append(out, err.Error()...))
		}
		b, err := Append(nil, m)
		if err != nil {
			t.Fatalf("frame %d: Append of a read %T: %v", i, m, err)
		}
		out = append(out, b...)
		if c, ok := m.(*Chunk); ok {
			if i%2 == 0 {
				if err = r.ReadPayload(dst[:c.Len]); err == nil {
					out = append(out, dst[:c.Len]...)
				}
			} else {
				err = r.DiscardPayload()
			}
			if errors.Is(err, ErrUsage) {
				t.Fatalf("frame %d payload: %v", i, err)
			}
			if err != nil {
				return string(append(out, err.Error()...))
			}
		}
	}
}

// FuzzRoundTrip builds a message of each type from the fuzzer's values,
// encodes it, and reads it back through both Decode and Reader. Append must
// refuse exactly the messages that break DefaultLimits.
func FuzzRoundTrip(f *testing.F) {
	f.Add(uint8(TypeHello), uint64(1), uint64(2), uint32(4096), uint32(3), "10.0.0.1:7000", "pod", []byte("0123456789abcdef"), true)
	f.Add(uint8(TypeFetch), uint64(1), uint64(2), uint32(0), uint32(0), "", "", bytes.Repeat([]byte{7}, 16*9), false)
	f.Add(uint8(TypeLookupResp), uint64(0), uint64(0), uint32(1), uint32(1), "req", "", bytes.Repeat([]byte{0xa5}, 16*17), true)
	f.Add(uint8(TypeChunk), uint64(1), uint64(2), uint32(1<<28-100), uint32(100), "", "", []byte(nil), false)
	f.Add(uint8(TypeChunk), uint64(1), uint64(2), uint32(0), uint32(4<<20+1), "", "", []byte(nil), false)
	f.Add(uint8(TypeSummary), uint64(1), uint64(2), uint32(1<<16), uint32(1), "", "", bytes.Repeat([]byte{3}, 16*5), true)
	f.Add(uint8(TypeLookupPending), uint64(7), uint64(0), uint32(0), uint32(0), "req", "", []byte(nil), false)
	f.Fuzz(func(t *testing.T, typ uint8, a, b uint64, c, d uint32, s1, s2 string, raw []byte, flag bool) {
		m := build(Type(typ%uint8(typeEnd-1)+1), a, b, c, d, s1, s2, raw, flag)
		enc, err := Append(nil, m)
		if want := valid(m); (err == nil) != want {
			t.Fatalf("Append(%+v): %v, want valid=%v", m, err, want)
		}
		if err != nil {
			return
		}
		typ2, body := splitFrame(t, enc)
		got, err := Decode(typ2, body, DefaultLimits())
		if err != nil || !reflect.DeepEqual(got, m) {
			t.Fatalf("Decode = %+v, %v; want %+v", got, err, m)
		}
		got, err = NewReader(bytes.NewReader(enc), DefaultLimits()).Next()
		if err != nil || !reflect.DeepEqual(got, m) {
			t.Fatalf("Reader.Next = %+v, %v; want %+v", got, err, m)
		}
	})
}

// build makes a message of type t from the fuzzer's values. Lists come from
// raw: one key per 16 bytes, hits and slots derived from the keys, nil when
// empty as the decoder returns them.
func build(t Type, a, b uint64, c, d uint32, s1, s2 string, raw []byte, flag bool) Message {
	var ks []Key
	for i := 0; i+KeySize <= len(raw); i += KeySize {
		ks = append(ks, Key(raw[i:i+KeySize]))
	}
	var hits []bool
	var slots []uint32
	for _, k := range ks {
		hits = append(hits, k[0]&1 == 1)
		slots = append(slots, binary.BigEndian.Uint32(k[:]))
	}
	switch t {
	case TypeHello:
		return &Hello{Version: uint8(a), PeerID: s1, Incarnation: b, Domain: s2, BlockBytes: c,
			Fingerprint: string(raw), HashSeed: s1 + s2, MaxInflight: d, MaxFrame: uint32(a >> 32), Attempt: b ^ a,
			Secret: secretOf(a, b)}
	case TypeHelloAck:
		return &HelloAck{PeerID: s1, Incarnation: a}
	case TypePing:
		return &Ping{Seq: a}
	case TypePong:
		return &Pong{Seq: a}
	case TypeLookup:
		return &Lookup{ReqID: s1, Round: a, Keys: ks}
	case TypeLookupResp:
		return &LookupResp{ReqID: s1, Round: a, Keys: ks, Hits: hits}
	case TypeFetch:
		return &Fetch{ReqID: s1, Round: a, Job: b, Keys: ks, Slots: slots}
	case TypeTransferDone:
		return &TransferDone{ReqID: s1, Round: a, Job: b, Success: flag, Bytes: uint64(c)<<32 | uint64(d)}
	case TypeAbort:
		return &Abort{ReqID: s1, Round: a, Job: b}
	case TypeAbortAck:
		return &AbortAck{ReqID: s1, Round: a, Job: b}
	case TypeGoodbye:
		return &Goodbye{Reason: GoodbyeReason(c), Detail: s1}
	case TypeDataAttach:
		return &DataAttach{PeerID: s1, Incarnation: a, Attempt: b, MAC: secretOf(b, a)}
	case TypeChunk:
		return &Chunk{Job: a, Block: uint32(b), Offset: c, Len: d, CRC: uint32(b >> 32)}
	case TypeProgress:
		return &Progress{Job: a, Bytes: b, Queued: flag}
	case TypeDone:
		return &Done{Job: a, Bytes: b}
	case TypeError:
		return &Error{Job: a, Code: ErrorCode(c), Msg: s1}
	case TypeProbe:
		return &Probe{Seq: a}
	case TypeProbeAck:
		return &ProbeAck{Seq: a}
	case TypeSummary:
		// Words from the slots, made increasing; Size from c, so that a
		// small c makes the message invalid (a word at or past Size).
		var words []uint32
		var values []uint64
		for i, s := range slots {
			w := uint32(i) + s%4
			if i > 0 {
				w += words[i-1] + 1 - uint32(i)
			}
			words, values = append(words, w), append(values, a^uint64(s))
		}
		return &Summary{Format: uint8(d), Reset: flag, Last: !flag, Epoch: a, Seq: b, Size: c, Words: words, Values: values}
	case TypeLookupPending:
		return &LookupPending{ReqID: s1, Round: a}
	}
	panic("build: type " + t.String())
}

// secretOf fills a secret or MAC from two of the fuzzer's values.
func secretOf(a, b uint64) (s [SecretSize]byte) {
	binary.BigEndian.PutUint64(s[:8], a)
	binary.BigEndian.PutUint64(s[8:], b)
	return s
}

// valid restates DefaultLimits independently of the encoder, for the
// fields build can push past them.
func valid(m Message) bool {
	lim := DefaultLimits()
	str := func(ss ...string) bool {
		for _, s := range ss {
			if len(s) > int(lim.MaxString) {
				return false
			}
		}
		return true
	}
	switch m := m.(type) {
	case *Hello:
		return str(m.PeerID, m.Domain, m.Fingerprint, m.HashSeed) && m.BlockBytes != 0 && m.BlockBytes <= lim.MaxBlockSize
	case *Chunk:
		return m.Len <= lim.MaxChunk && uint64(m.Offset)+uint64(m.Len) <= uint64(lim.MaxBlockSize)
	case *HelloAck:
		return str(m.PeerID)
	case *Lookup:
		return str(m.ReqID) && len(m.Keys) <= int(lim.MaxKeys)
	case *LookupResp:
		return str(m.ReqID) && len(m.Keys) <= int(lim.MaxKeys)
	case *Fetch:
		return str(m.ReqID) && len(m.Keys) <= int(lim.MaxKeys)
	case *TransferDone:
		return str(m.ReqID)
	case *Abort:
		return str(m.ReqID)
	case *AbortAck:
		return str(m.ReqID)
	case *Goodbye:
		return str(m.Detail)
	case *DataAttach:
		return str(m.PeerID)
	case *Error:
		return str(m.Msg)
	case *LookupPending:
		return str(m.ReqID)
	case *Summary:
		for i, w := range m.Words {
			if w >= m.Size || (i > 0 && w <= m.Words[i-1]) {
				return false
			}
		}
		return len(m.Words) <= int(lim.MaxKeys)
	}
	return true
}

func scribble(b []byte) {
	for i := range b {
		b[i] = 0xa5
	}
}
