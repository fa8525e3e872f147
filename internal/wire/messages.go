package wire

// Version is the protocol version carried in every frame header and in Hello.
// A frame with another version is refused with ErrVersion. Version 3 binds a
// data connection to its control connection by a secret (Hello.Secret,
// DataAttach.MAC). Version 4 adds Summary (a new type; no body changed),
// so that a Summary is only ever sent to a peer that can read it. Version 5
// adds LookupPending (a new type; no body changed), for the same reason.
const Version uint8 = 5

// KeySize is the size of a block key: the engine's chained prefix hash,
// truncated or padded to 16 bytes.
const KeySize = 16

// Key names one block.
type Key [KeySize]byte

// Type identifies a message. Values are stable on the wire: never reorder,
// only append.
type Type uint8

const (
	TypeInvalid Type = iota
	// Control plane.
	TypeHello
	TypeHelloAck
	TypePing
	TypePong
	TypeLookup
	TypeLookupResp
	TypeFetch
	TypeTransferDone
	TypeAbort
	TypeAbortAck
	TypeGoodbye
	// Data plane.
	TypeDataAttach
	TypeChunk
	TypeProgress
	TypeDone
	TypeError
	// Probes over the data path (failure-domain policy).
	TypeProbe
	TypeProbeAck
	// Control plane, version 4: what a peer can serve (internal/summary).
	TypeSummary
	// Control plane, version 5: a lookup the producer still works on.
	TypeLookupPending
	typeEnd
)

var typeNames = [...]string{
	TypeInvalid: "invalid", TypeHello: "hello", TypeHelloAck: "hello-ack",
	TypePing: "ping", TypePong: "pong", TypeLookup: "lookup", TypeLookupResp: "lookup-resp",
	TypeFetch: "fetch", TypeTransferDone: "transfer-done", TypeAbort: "abort",
	TypeAbortAck: "abort-ack", TypeGoodbye: "goodbye", TypeDataAttach: "data-attach",
	TypeChunk: "chunk", TypeProgress: "progress", TypeDone: "done", TypeError: "error",
	TypeProbe: "probe", TypeProbeAck: "probe-ack", TypeSummary: "summary",
	TypeLookupPending: "lookup-pending",
}

func (t Type) String() string {
	if t < typeEnd {
		return typeNames[t]
	}
	return "unknown"
}

// Message is any decoded frame body.
type Message interface {
	Type() Type
}

// Limits bounds what a decoder accepts. Every length on the wire is checked
// against these before anything is allocated.
type Limits struct {
	MaxFrame     uint32 // whole frame, length prefix and header included (a Chunk's payload excluded: see MaxChunk)
	MaxKeys      uint32 // keys in one Lookup, LookupResp or Fetch
	MaxString    uint32 // any string field (peer id, domain, request id, reason)
	MaxChunk     uint32 // payload bytes of one Chunk
	MaxBlockSize uint32 // largest block a peer may announce
}

// DefaultLimits are generous for real deployments and still bounded.
func DefaultLimits() Limits {
	return Limits{
		MaxFrame:     4 << 20,
		MaxKeys:      64 << 10,
		MaxString:    4 << 10,
		MaxChunk:     4 << 20,
		MaxBlockSize: 256 << 20,
	}
}

// Hello opens a session; both sides send one as soon as the control
// connection exists. A peer validates it and answers HelloAck or Goodbye.
type Hello struct {
	Version     uint8
	PeerID      string // advertised host:port
	Incarnation uint64 // picked at process start; a new value is a new peer
	Domain      string // failure domain; empty means "its own"
	BlockBytes  uint32
	Fingerprint string // layout fingerprint; empty is compatible with anything
	HashSeed    string
	MaxInflight uint32 // max in-flight jobs the sender accepts
	MaxFrame    uint32 // max frame the sender accepts
	// Attempt names the connect attempt (set by the dialer, zero from the
	// accepting side): the accepting side pairs this Hello only with the
	// DataAttach of the same attempt, never with a data connection left
	// over from an earlier attempt of the same process (version 2).
	Attempt uint64
	// Secret is the dialer's random secret for this connect attempt (zero
	// from the accepting side): the attempt's DataAttach carries
	// AttachMAC(Secret, ...), and the accepting side pairs this Hello only
	// with a data connection that proves it knew the secret. Attempt
	// counters can be guessed; the secret cannot (version 3).
	Secret [SecretSize]byte
}

// SecretSize is the size of Hello.Secret and DataAttach.MAC.
const SecretSize = 16

// HelloAck accepts the peer's Hello.
type HelloAck struct {
	PeerID      string
	Incarnation uint64
}

// Ping asks for a Pong; any traffic is proof of life, so pings are sent
// only on idle connections.
type Ping struct{ Seq uint64 }

// Pong answers a Ping.
type Pong struct{ Seq uint64 }

// Lookup asks which of Keys the producer holds, for one request and round.
type Lookup struct {
	ReqID string
	Round uint64
	Keys  []Key
}

// LookupResp answers one Lookup, keys in the lookup's order.
type LookupResp struct {
	ReqID string
	Round uint64
	Keys  []Key
	Hits  []bool // same length as Keys
}

// LookupPending says that the producer has not answered the Lookup of
// ReqID's round Round yet but still works on it (its engine is starved
// of CPU, not stopped): the consumer may wait on, within its own cap.
// It is never an answer: a LookupResp still follows, HIT or MISS.
type LookupPending struct {
	ReqID string
	Round uint64
}

// Fetch asks the producer to stream Keys into the consumer's Slots, as job
// Job of round Round. An empty Keys list is the terminal "request finished".
type Fetch struct {
	ReqID string
	Round uint64
	Job   uint64
	Keys  []Key
	Slots []uint32 // same length as Keys
}

// TransferDone ends a round's transfer from the producer's side.
type TransferDone struct {
	ReqID   string
	Round   uint64
	Job     uint64
	Success bool
	Bytes   uint64
}

// Abort asks the producer to stop a round.
type Abort struct {
	ReqID string
	Round uint64
	Job   uint64
}

// AbortAck says the producer has stopped writing for the round.
type AbortAck struct {
	ReqID string
	Round uint64
	Job   uint64
}

// GoodbyeReason says why a session ends in order. Stable on the wire.
type GoodbyeReason uint8

const (
	GoodbyeUnspecified GoodbyeReason = iota
	GoodbyeIdle
	GoodbyeShutdown
	GoodbyeIncompatible
	GoodbyeDuplicate
	GoodbyeProtocol
	GoodbyeTooManyPeers
	// GoodbyeFault: this side detected a fault on the session (a stalled
	// data path, a silent peer, an unacknowledged abort) and ends it. For
	// the receiver it is an orderly end: the sender is alive and chose to.
	GoodbyeFault
)

// Goodbye ends a session in order. Never evidence of a fault.
type Goodbye struct {
	Reason GoodbyeReason
	Detail string
}

// DataAttach is the first frame on a data connection: it names the session
// the connection belongs to.
type DataAttach struct {
	PeerID      string
	Incarnation uint64
	Attempt     uint64 // the Hello's Attempt (version 2)
	// MAC is AttachMAC(Hello.Secret, PeerID, Incarnation, Attempt): proof
	// that this connection was opened by whoever sent the Hello (version 3).
	MAC [SecretSize]byte
}

// Chunk carries Len payload bytes of block Block of job Job, at Offset within
// the block. The payload follows the header on the wire and is not part of
// the decoded struct: the reader copies it straight into its slot.
type Chunk struct {
	Job    uint64
	Block  uint32
	Offset uint32
	Len    uint32
	CRC    uint32 // CRC32C (Castagnoli) of the payload
}

// Progress is sent at least every progress interval while a job is queued
// or sending, so that silence on the data path means a fault.
type Progress struct {
	Job    uint64
	Bytes  uint64 // bytes sent so far
	Queued bool   // not started yet: waiting behind other jobs
}

// Done ends a job on the data path: every chunk has been sent.
type Done struct {
	Job   uint64
	Bytes uint64
}

// ErrorCode is a data-path failure reason. Stable on the wire.
type ErrorCode uint8

const (
	ErrUnspecified ErrorCode = iota
	ErrAborted
	ErrNoSupply
	ErrSlotGone
	ErrInternal
)

// Error ends a job on the data path with a failure.
type Error struct {
	Job  uint64
	Code ErrorCode
	Msg  string
}

// Probe asks the peer's data path to answer; used to tell a live sibling
// from a dead one when its failure domain is suspect.
type Probe struct{ Seq uint64 }

// ProbeAck answers a Probe.
type ProbeAck struct{ Seq uint64 }

// Summary is one part of an update of the sender's summary of the blocks
// it can serve (internal/summary): Words[i] of its filter is now Values[i].
// An update is one or more parts with the same Epoch and Seq, the last with
// Last set; a Reset part starts a snapshot (the receiver clears its copy to
// Size zero words first). Format names the filter's layout: a receiver that
// does not know it ignores the summary (the frame itself is valid). Words
// are strictly increasing and below Size; Values is as long as Words.
type Summary struct {
	Format uint8
	Reset  bool
	Last   bool
	Epoch  uint64 // the sender's summary epoch: a new one after a restart
	Seq    uint64 // the update's sequence number within Epoch
	Size   uint32 // the filter's size in 64-bit words
	Words  []uint32
	Values []uint64
}

func (*Hello) Type() Type        { return TypeHello }
func (*HelloAck) Type() Type     { return TypeHelloAck }
func (*Ping) Type() Type         { return TypePing }
func (*Pong) Type() Type         { return TypePong }
func (*Lookup) Type() Type       { return TypeLookup }
func (*LookupResp) Type() Type   { return TypeLookupResp }
func (*Fetch) Type() Type        { return TypeFetch }
func (*TransferDone) Type() Type { return TypeTransferDone }
func (*Abort) Type() Type        { return TypeAbort }
func (*AbortAck) Type() Type     { return TypeAbortAck }
func (*Goodbye) Type() Type      { return TypeGoodbye }
func (*DataAttach) Type() Type   { return TypeDataAttach }
func (*Chunk) Type() Type        { return TypeChunk }
func (*Progress) Type() Type     { return TypeProgress }
func (*Done) Type() Type         { return TypeDone }
func (*Error) Type() Type        { return TypeError }
func (*Probe) Type() Type        { return TypeProbe }
func (*ProbeAck) Type() Type     { return TypeProbeAck }
func (*Summary) Type() Type      { return TypeSummary }

func (*LookupPending) Type() Type { return TypeLookupPending }
