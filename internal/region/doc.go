// Package region maps an engine's KV region: a shared-memory file (vLLM's
// CPU tier, /dev/shm/vllm_offload_{engine_id}.mmap) holding NumChunks
// chunks of RowStride bytes, chunk b at b*RowStride. The engine owns the
// memory and writes it; kvp2p maps it MAP_SHARED to move chunks to and from
// peers without a copy.
//
// Contract: Open checks that the path is a regular file inside the allowed
// directory and at least NumChunks*RowStride long, and maps exactly that
// span. It resolves the path once, then opens the result component by
// component with O_NOFOLLOW and checks the opened file (fstat), so a link
// swapped in after the check cannot lead it outside the directory. A file
// truncated after mapping makes a touch past its end fault (SIGBUS): the
// data path's goroutines turn that into a failed connection
// (datapath.ErrMemoryFault), not a dead process. The mapping stays valid until Close; the caller must not Close while
// any goroutine may still touch a chunk (the node closes a region only once
// its store has no Filling and no pinned slot). Chunk is safe from any
// goroutine.
package region
