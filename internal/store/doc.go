// Package store is a node's block arena: fixed-size slots in one contiguous
// byte span, a key→slot index, LRU eviction, pin counts and write fences.
//
// # Concurrency
//
// A Store is NOT safe for concurrent use. Exactly one goroutine (the node's
// loop) owns it and calls every method. Other goroutines (the data path
// filling or sending a slot, the engine through shared memory) may read or
// write the bytes of a slot returned by Bytes, but only while the owner's
// state machine has granted them that right, and they must never call a
// method. The states below are what make such a grant sound: the owner hands
// a slot to a writer only while it is Filling and to a reader only while it
// is pinned, and the store guarantees that it reuses neither.
//
// # Slot states
//
//	         Reserve                 Commit
//	Free ─────────────▶ Filling ─────────────▶ Ready ──┐
//	 ▲                    │                      │     │ Pin / Unpin
//	 └─── CancelFill ─────┘                      │ ◀───┘
//	 ▲                                           │
//	 └──── evicted by Reserve, Remove, or ───────┘
//	       superseded by a Commit of the same key (when unpinned)
//
// Free: holds nothing; Reserve may hand it out.
//
// Filling is the write fence. A writer outside the loop may be storing bytes
// into the slot, so the slot is invisible to Lookup, Contains and PinKey,
// cannot be pinned, is never evicted and is never handed out again. The only
// ways out are Commit (the fill succeeded) and CancelFill (the fill failed and
// the owner knows the writer has stopped: e.g. after AbortAck, or after the
// data connection is closed and its goroutine has returned). There is
// deliberately no other way to free a Filling slot, because freeing it while
// a writer may still run would let that writer corrupt the slot's next
// tenant.
//
// Ready: holds the block of its key. An unpinned Ready slot is on the LRU
// list and may be evicted by Reserve when no slot is Free. A pinned one
// (Pins > 0) is being read by someone outside the loop and is never evicted
// or freed.
//
// # Orphans
//
// Remove, or a Commit of a key that another Ready slot already holds, takes
// the old slot out of the index at once, so new lookups see only the new
// state. If the old slot is pinned it cannot be freed yet: it becomes an
// orphan, still StateReady and still readable by those holding pins, but
// unreachable by key and not pinnable again. Its last Unpin frees it.
//
// # Recency
//
// Lookup, PinKey, Commit, Put and the last Unpin of a slot make it the most
// recently used. Contains and Pin do not touch recency. Among Free slots
// Reserve may pick any; callers must not rely on which.
//
// # Cost
//
// All state lives in slices indexed by slot, allocated by New or NewOn; the
// LRU list is intrusive (int32 links in one slice). Lookup, Pin, Unpin,
// Reserve, Commit, CancelFill, Put and Remove allocate nothing except on their
// error paths (ErrFull is returned unwrapped, so a full store allocates
// nothing either).
package store
