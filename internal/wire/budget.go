package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
)

// ErrBudget: a frame needs more buffer than the shared Budget has left.
var ErrBudget = errors.New("frame memory budget spent")

// Frame size limits derived from what the protocol can carry (issue 25,
// attack 4: readers accepted 4 MiB control frames, the largest legitimate
// one being a Fetch of MaxKeys keys, ~1.3 MiB).

// ControlFrameLimit is the largest control frame a peer within lim can
// send: a Fetch of MaxKeys keys and slots with a ReqID of MaxString bytes
// (a LookupResp, a Lookup or a Hello of four such strings is smaller). A
// reader of control frames needs no larger MaxFrame.
func ControlFrameLimit(lim Limits) uint32 {
	str := uvarintLen(uint64(lim.MaxString)) + uint64(lim.MaxString)
	keys := uint64(lim.MaxKeys)
	count := uvarintLen(keys)
	fetch := str + 8 + 8 + count + keys*KeySize + count + keys*4
	resp := str + 8 + count + keys*KeySize + count + (keys+7)/8
	hello := 1 + 4*str + 8 + 3*4 + 8
	summary := 1 + 2 + 8 + 8 + 4 + count + keys*summaryEntry
	n := frameHeader + max(fetch, resp, hello, summary, smallControl(str))
	return uint32(min(n, uint64(^uint32(0))))
}

// DataFrameLimit is the largest frame other than a Chunk's payload that a
// data connection carries: an Error with a Msg of MaxString bytes (a
// Chunk header, Progress, Done, Probe and DataAttach are smaller), with
// room for a field or two more.
func DataFrameLimit(lim Limits) uint32 {
	str := uvarintLen(uint64(lim.MaxString)) + uint64(lim.MaxString)
	n := frameHeader + str + 64
	return uint32(min(n, uint64(^uint32(0))))
}

// smallControl bounds every other body: a few integers and two strings
// (a Goodbye, a TransferDone, a DataAttach), with room for a field or two
// more.
func smallControl(str uint64) uint64 { return 2*str + 128 }

func uvarintLen(v uint64) uint64 {
	var b [binary.MaxVarintLen64]byte
	return uint64(binary.PutUvarint(b[:], v))
}

// Budget is memory shared by Readers for the part of their buffers above
// the streaming size (64 KiB): what only frames that large need. A Reader
// grows its buffer as a large frame's bytes arrive, charging the growth
// here first, and gives it back once the frame is decoded (or at
// Release). A frame the budget cannot hold fails its Reader with an error
// wrapping ErrBudget, so that many connections each holding an unfinished
// large frame hold at most the budget between them, whatever their
// headers announce. Safe for concurrent use.
type Budget struct {
	limit int64
	used  atomic.Int64
}

// NewBudget returns a budget of limit bytes.
func NewBudget(limit int64) *Budget { return &Budget{limit: limit} }

// Used is the bytes charged now.
func (b *Budget) Used() int64 { return b.used.Load() }

// Limit is the budget's size.
func (b *Budget) Limit() int64 { return b.limit }

// take charges n bytes unless that would pass the limit (force: charge
// anyway, for growth the Reader cannot refuse).
func (b *Budget) take(n int64, force bool) bool {
	for {
		u := b.used.Load()
		if !force && u+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

func (b *Budget) give(n int64) { b.used.Add(-n) }

// budgetErr says how much a frame needed and what the budget had.
func budgetErr(want int, b *Budget) error {
	return fmt.Errorf("wire: buffer of %d bytes for a frame: %d of %d bytes in use: %w", want, b.Used(), b.limit, ErrBudget)
}
