// Package wire defines kvp2p's messages and their binary encoding: framing,
// versioning and bounded decoding (docs/design.md §4). It does no I/O of its own
// beyond Reader, which wraps an io.Reader. Writing is the caller's: one
// writer goroutine per connection appends frames with Append and
// AppendChunkHeader and writes them.
//
// # Framing
//
// Every message is one frame:
//
//	length  uint32 big-endian: N, the bytes that follow (N >= 2)
//	version uint8: Version
//	type    uint8: Type
//	body    N-2 bytes, laid out per type
//
// A Chunk frame carries only the chunk header (ChunkHeaderLen bytes in all).
// Exactly Chunk.Len payload bytes follow it on the stream, not counted in N,
// so that a sender writes header and payload from the arena with
// net.Buffers and a receiver reads the payload straight into its slot.
//
// # Bodies
//
// Fields follow one another in declaration order, with no tags and no
// padding:
//
//	uint8, uint32, uint64   fixed width, big-endian
//	bool                    one byte, 0 or 1
//	string                  uvarint length, then the bytes
//	[]Key                   uvarint count, then count*16 bytes
//	[]bool                  uvarint count, then ceil(count/8) bytes; element i
//	                        is bit i%8 (LSB first) of byte i/8; unused bits 0
//	[]uint32                uvarint count, then count*4 bytes
//
// Scalars are fixed width so that the chunk header has a constant size and
// the hot encoders never branch; the control plane is too rare for varint
// savings to matter. Lengths are uvarints because they are mostly small.
// Fetch.Slots and LookupResp.Hits must be as long as their Keys.
//
// The encoding is canonical: the decoders refuse non-minimal uvarints, bools
// other than 0 or 1, set padding bits and trailing bytes, so a body that
// decodes re-encodes to the same bytes. An empty list decodes as nil.
// GoodbyeReason and ErrorCode values pass through unchecked; a value the
// receiver does not know means "unspecified".
//
// # Versioning
//
// The version byte of every frame must equal Version, else Reader refuses the
// frame with ErrVersion. Any change to a body layout bumps Version. Types and
// enum values are only ever appended; an old peer refuses a type it does not
// know (ErrUnknownType), so a new type is sent only to peers known to have
// it, while an unknown enum value is read as unspecified. Hello.Version
// repeats the sender's version for the handshake to compare and report; the
// codec does not check it.
//
// # Limits
//
// A decoder is given Limits and checks every length against them, and
// against what is left of the frame, before allocating: a peer cannot make
// this side allocate more than MaxFrame for a frame, whatever it sends. A
// Hello with BlockBytes zero or over MaxBlockSize and a Chunk with Len over
// MaxChunk or ending past MaxBlockSize are refused. Append refuses what a
// decoder with DefaultLimits would refuse, so it never produces a frame that
// decoder cannot parse; honouring a peer's smaller Hello.MaxFrame is the
// session's job.
//
// # Errors
//
// Errors wrap one of ErrVersion, ErrTooLarge, ErrMalformed, ErrUnknownType
// (the peer's fault, a protocol error) or ErrUsage (the caller's bug), and
// name the field at fault. Reader's stream errors wrap the I/O error instead:
// io.ErrUnexpectedEOF for a stream cut inside a frame; a clean end between
// frames is io.EOF itself.
//
// # Reading and memory
//
// A Reader's buffer follows the traffic (rbuf.go). It starts as 256 bytes
// inside the Reader, which holds an idle connection's heartbeats and
// keepalives, so an idle Reader owns no other buffer. It grows to hold a
// frame larger than it (at most MaxFrame, checked before anything is
// allocated) and doubles, up to 64 KiB, when a read fills it (a burst of
// frames or small chunks). It goes back to the inline 256 bytes after 4
// reads in a row of less than that, with no chunk and no larger frame
// among them: on an idle session, 4 heartbeat intervals. On Linux TCP, payloads of 16
// KiB or more do not pass through it (readv, src.go), so a load of large
// chunks needs no more than the idle buffer; ReadPayloadAhead reads on
// past a payload into the caller's guesses of where the next ones go. Steady-state reading,
// growing done, allocates nothing.
//
// # Ownership
//
// Decoded messages never alias the bytes they were decoded from. Reader.Next
// returns the data-path types (*Chunk, *Progress, *Done, *Probe, *ProbeAck)
// in structs the Reader owns and overwrites on the next call, so steady-state
// reading allocates nothing; every other message is the caller's to keep.
package wire
