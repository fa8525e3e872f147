// Package datapath moves block bytes between a data connection and arena
// slots (docs/design.md §3-§5): chunks with CRC32C, Progress frames, keepalives
// and probes. It decides nothing: the node's loop tells a Conn what to send
// and what to expect, and the Conn reports what happened as Events.
//
// # Goroutines
//
// Start runs two goroutines per Conn. When the process has at least 4 Ps
// (cores to spare), each may start one helper (sum.go) the first time it
// handles a chunk of at least 64 KiB:
//
//   - the writer owns the write side. It serves the oldest SendWindow
//     producer jobs (default 2) round-robin, one chunk per turn, so a large
//     job does not starve a small one, and later jobs wait their turn, so
//     that jobs finish one after another instead of all together. A chunk
//     goes out in a writev of {control frames + chunk header, payload},
//     the payload sliced straight from the source slot (no copy), with up
//     to three more chunks' {header, payload} behind it while the jobs
//     have blocks queued past them (writer.batch: a job's Done still goes
//     out in the write after its last payload's). Before
//     each chunk it adds the control frames that are due: ProbeAcks, Probes,
//     terminal frames, a Progress for every open job silent for
//     ProgressInterval (so a queued job shows life), and, when nothing else
//     was written for KeepaliveInterval, a keepalive Probe{Seq: 0}. It waits
//     on a mutex-protected command queue plus a wake channel; no lock is
//     held while writing. A chunk's CRC32C is the one its block came with
//     (Block.Sums, taken by the store at Put, or kept from the load that
//     filled the slot: see SumMemory) when the chunk is exactly one of its
//     sum pieces; else the writer sums it. Its helper sums the chunk
//     it predicts it will send next while the current one is written; the
//     sum is used only if the prediction was exact.
//   - the reader owns the read side. It sets a read deadline of ReadTimeout
//     before each frame and reads each valid chunk straight into its
//     destination slot, and on, in the same read, into the slots where it
//     expects the job's next chunks (reader.guess: a writer sends a job's
//     pieces in order), so that it reads up to a mebibyte per readv as a
//     plain stream would; wire.Reader takes back whatever missed before
//     it returns another frame. Its helper checks a large chunk's CRC32C while the
//     next chunk is read; every other frame waits for that check first, so
//     events keep their order, and a chunk's RecvProgress (or RecvCorrupt)
//     comes when the next frame arrives (the producer sends at least a
//     Progress or a keepalive while a job is open). Small chunks are
//     checked inline. It answers probes through the writer.
//
// Helpers only compute: the writer and the reader collect every result
// before the next write, before any event that releases slots and before
// they exit, so no helper reads a slot after its SendEnd, RecvEnd or
// Closed. Helpers exit with their owner, or when the connection goes idle:
// after 4 keepalives in a row (written, for the writer's helper; read, for
// the reader's), so an idle session runs only its two goroutines per Conn;
// the next large chunk starts a helper again.
//
// Both end on Close, on any read or write error, or on a protocol error
// from the peer; the first error closes the socket, which stops the other.
// The last one to exit emits Closed, then closes Done. Close does not wait
// (the emit callback may be blocked on the very loop that calls Close);
// wait on Done, or for the Closed event.
//
// # Slot ownership
//
// Producer: the slots named in Send are read by the writer until SendEnd for
// the job, or Closed. The node keeps them pinned and unchanged until then.
//
// Consumer: the slots given to Expect are written by the reader until RecvEnd
// for the job, or Closed. The node keeps them reserved (store: Filling) until
// then, and must not free them on AbortAck alone: chunks already in flight
// on the data connection would still land. The producer always writes a
// terminal frame (Done, or Error on Cancel), so RecvEnd always follows
// unless the connection dies, and then Closed follows. A chunk is placed
// only if it belongs to an expected job, its block index is in range, its
// offset is exactly where that block's bytes stopped and it ends within the
// block; anything else is a protocol error that closes the Conn before a
// byte of payload is read. Bytes from a job whose RecvEnd is not OK, or that
// ended by Closed, are garbage and must not be committed.
//
// # Events and their order
//
// emit is called from the reader and the writer, possibly concurrently. It
// must not call back into the Conn; it may block briefly, which stalls that
// direction of the connection. Per Conn:
//
//   - SendEnd comes from the writer, after the job's terminal frame was
//     written; at most one per job lifetime (Cancel of an ended or unknown
//     job writes an Error frame and emits one more SendEnd{OK: false}).
//   - RecvProgress, RecvCorrupt and RecvEnd come from the reader, in frame
//     order: for one job, any RecvProgress and at most one RecvCorrupt, then
//     at most one RecvEnd, after which nothing more for that job. Chunk
//     progress is coalesced: the first chunk of a job is reported at once,
//     then at most one RecvProgress per job per ProgressInterval/4; every
//     Progress frame is reported. ProbeAck also comes from the reader.
//   - Closed is emitted exactly once, after every other event of the Conn
//     has returned from emit, once both goroutines have exited. Jobs without
//     SendEnd or RecvEnd by then are over and failed.
//
// There is no order between reader events and writer events.
//
// # Cost
//
// In steady state neither side allocates per chunk: the writer reuses its
// header buffer, its net.Buffers and its message structs; the reader gets
// reused structs from wire.Reader and reads payloads into the slots. Events
// are allocated (boxed), which is why chunk progress is coalesced.
// Allocation per job (its state, a copy of its blocks or slots) is expected.
//
// # Queues
//
// Commands from the loop (Open, Send, Cancel, Probe) are queued without
// bound: the node bounds them by its in-flight job limit. ProbeAcks asked
// for by the peer are bounded (64 pending); beyond that the oldest are
// dropped and counted (ProbeAckDrops). The reader never blocks on the
// writer.
package datapath
