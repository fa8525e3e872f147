package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestFrameLimitsFitTheProtocol: every message at its limits' maximum fits
// the derived limit of the connection it travels on, and the largest, a
// Fetch of MaxKeys keys with a ReqID of MaxString bytes, is exactly the
// control limit: no legitimate frame is refused and nothing larger is
// accepted (issue 25, attack 4).
func TestFrameLimitsFitTheProtocol(t *testing.T) {
	lim := DefaultLimits()
	ctl, data := ControlFrameLimit(lim), DataFrameLimit(lim)
	for _, m := range samples() {
		n := len(frame(t, m))
		want := ctl
		switch m.Type() {
		case TypeChunk, TypeProgress, TypeDone, TypeError, TypeProbe, TypeProbeAck, TypeDataAttach:
			want = data
		}
		if uint32(n) > want {
			t.Errorf("%T of %d bytes over its limit %d", m, n, want)
		}
	}
	maxStr := strings.Repeat("s", int(lim.MaxString))
	k := int(lim.MaxKeys)
	largest := frame(t, &Fetch{ReqID: maxStr, Round: 1 << 60, Job: 1 << 60, Keys: keys(k), Slots: make([]uint32, k)})
	if uint32(len(largest)) != ctl {
		t.Fatalf("largest Fetch %d bytes, control limit %d", len(largest), ctl)
	}
	if ctl > 1400<<10 || data > 8<<10 {
		t.Fatalf("control limit %d, data limit %d: more than the protocol needs", ctl, data)
	}
	t.Logf("control frames at most %d bytes, data frames (payload aside) %d", ctl, data)
}

// largeHeader is the header of a Lookup frame of size bytes in all.
func largeHeader(size int) []byte {
	h := make([]byte, frameHeader)
	binary.BigEndian.PutUint32(h, uint32(size-lenPrefix))
	h[4], h[5] = Version, byte(TypeLookup)
	return h
}

// TestReaderGrowsAsBytesArrive: a header announcing a large frame costs
// nothing until its body arrives; the buffer grows with the bytes, at most
// doubling what came, and the budget is charged only above the streaming
// size and is given back at Release.
func TestReaderGrowsAsBytesArrive(t *testing.T) {
	lim := DefaultLimits()
	lim.MaxFrame = ControlFrameLimit(lim)
	bg := NewBudget(8 << 20)
	for _, sent := range []int{0, 1000, readBufSize, 300 << 10} {
		in := append(largeHeader(int(lim.MaxFrame)), make([]byte, sent)...)
		r := NewReader(bytes.NewReader(in), lim)
		r.SetBudget(bg)
		if _, err := r.Next(); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("%d bytes of the body: %v, want a cut stream", sent, err)
		}
		if got := len(r.b.buf); got > max(readBufSize, 2*sent+frameHeader) {
			t.Fatalf("%d bytes of a %d-byte frame came: buffer of %d bytes", sent, lim.MaxFrame, got)
		}
		if want := int64(max(0, len(r.b.buf)-readBufSize)); bg.Used() != want {
			t.Fatalf("%d bytes came: budget charged %d, want %d", sent, bg.Used(), want)
		}
		r.Release()
		if bg.Used() != 0 {
			t.Fatalf("budget still charged %d after Release", bg.Used())
		}
		if _, err := r.Next(); err == nil {
			t.Fatal("a released reader read on")
		}
	}
}

// TestBudgetRefusesAndGivesBack: unfinished large frames hold at most the
// budget between them; a frame over what is left fails its reader with
// ErrBudget, and a decoded large frame gives its memory back at once.
func TestBudgetRefusesAndGivesBack(t *testing.T) {
	lim := DefaultLimits()
	lim.MaxFrame = ControlFrameLimit(lim)
	bg := NewBudget(1 << 20)
	// Readers each holding 400 KiB of an unfinished frame: the third is
	// refused.
	var held []*Reader
	for i := range 3 {
		in := append(largeHeader(int(lim.MaxFrame)), make([]byte, 400<<10)...)
		r := NewReader(bytes.NewReader(in), lim)
		r.SetBudget(bg)
		_, err := r.Next()
		if i < 2 && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("reader %d: %v, want a cut stream", i, err)
		}
		if i == 2 && !errors.Is(err, ErrBudget) {
			t.Fatalf("reader %d: %v, want ErrBudget", i, err)
		}
		if bg.Used() > bg.Limit() {
			t.Fatalf("budget used %d of %d", bg.Used(), bg.Limit())
		}
		held = append(held, r)
	}
	for _, r := range held {
		r.Release()
	}
	if bg.Used() != 0 {
		t.Fatalf("budget charged %d after every reader released", bg.Used())
	}

	// A whole large Lookup decodes; its buffer goes back after it, and a
	// Ping behind it reads as usual.
	big := frame(t, &Lookup{ReqID: "r", Round: 1, Keys: keys(40000)})
	in := append(big, frame(t, &Ping{Seq: 9})...)
	r := NewReader(bytes.NewReader(in), lim)
	r.SetBudget(bg)
	m, err := r.Next()
	if err != nil || len(m.(*Lookup).Keys) != 40000 {
		t.Fatalf("large lookup: %v", err)
	}
	if bg.Used() != 0 || len(r.b.buf) > readBufSize {
		t.Fatalf("after the frame: budget %d, buffer %d bytes", bg.Used(), len(r.b.buf))
	}
	if m, err := r.Next(); err != nil || m.(*Ping).Seq != 9 {
		t.Fatalf("ping after the large frame: %v %v", m, err)
	}
	r.Release()
}
