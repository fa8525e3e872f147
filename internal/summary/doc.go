// Package summary is how a node tells its peers, compactly, which blocks it
// can serve, and how a node finds, among its peers' summaries, the one that
// probably holds the longest prefix of a request's keys (docs/find.md).
//
// A summary is a blocked Bloom filter over block keys: each key sets Hashes
// bits in each of Probes 64-bit words (Position), so a membership test
// reads two words, and a filter is a power-of-two number of words sized
// from the producer's chunk count (SizeWords). A Producer keeps the exact chunk → key table of
// its engine's CPU tier (a store into a chunk replaces whatever the chunk
// held, which is how removals are learnt) and turns changes into updates:
// a snapshot (Reset, then the non-zero words) for a new receiver, and
// deltas (the words whose value changed since the last Flush) for all.
// Words are sent as values, not flips, so applying an update twice is
// harmless. An Index applies the updates of many peers and answers Find.
//
// Contract:
//
//   - Pure: no I/O, no clock, no goroutines; times are arguments. Not safe
//     for concurrent use: one owner (the node's loop, or a simulator).
//   - An update is one or more wire.Summary parts with the same Epoch and
//     Seq, the last with Last set. A receiver applies a delta only on top of
//     Seq-1 of the same Epoch; anything else (a gap, another epoch, an
//     unknown Format, a size over its bound) leaves that peer's summary out
//     of Find until the next snapshot, and Apply says so with an error: the
//     sender answers by sending a snapshot (Producer.Snapshot).
//   - Find never returns a peer the caller's Eligible refuses, nor one whose
//     summary is older than MaxAge; a hit is a probability (false positives
//     at about FalsePositiveRate), never a promise: the peer's own lookup
//     answer decides.
//   - Bounds: a receiver keeps at most MaxWords words per peer; a Producer
//     emits parts of at most MaxEntries words.
package summary
