package session

import (
	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/store"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// DataOpKind names an operation on the session's data path.
type DataOpKind uint8

const (
	// OpExpect registers a consumer job's destination slots with the reader.
	OpExpect DataOpKind = iota + 1
	// OpOpen tells the writer a producer job exists (queued): it sends
	// Progress frames until the job ends.
	OpOpen
	// OpSend hands the writer blocks of a producer job; Last ends the job.
	OpSend
	// OpCancel stops a producer job; the writer sends a terminal Error frame.
	OpCancel
	// OpProbe sends a Probe{Seq} over the data path; the peer's answer comes
	// back as a ProbeAck event (failure-domain policy).
	OpProbe
)

// Block is one block of a producer job: its index in the consumer's fetch
// and the local slot it is read from.
type Block struct {
	Index uint32
	Slot  store.Slot
}

// DataOp is one operation for the data path.
type DataOp struct {
	Kind   DataOpKind
	Job    uint64
	Slots  []store.Slot // OpExpect: destination slots, block i into Slots[i]
	Blocks []Block      // OpSend
	Last   bool         // OpSend
	Seq    uint64       // OpProbe
}

// LoadResult is the one terminal result of a load.
type LoadResult struct {
	Job    uint64
	ReqID  string
	OK     bool
	Bytes  uint64
	Reason string // why it failed
}

// StoreResult settles a store job (the producer's pins for it can go).
type StoreResult struct {
	Job uint64
	OK  bool
}

// Out is what a session decided since the last TakeOut.
type Out struct {
	Msgs     []wire.Message
	Data     []DataOp
	Loads    []LoadResult
	Stores   []StoreResult
	Releases []uint64 // consumer jobs whose destination slots are now safe to free
	NewFetch []string // request ids whose first Fetch arrived on this session
	Ended    health.Cause
}

// Empty reports whether there is nothing to act on.
func (o *Out) Empty() bool {
	return len(o.Msgs) == 0 && len(o.Data) == 0 && len(o.Loads) == 0 && len(o.Stores) == 0 &&
		len(o.Releases) == 0 && len(o.NewFetch) == 0 && o.Ended == health.CauseNone
}
