// Package sim is kvp2p's deterministic discrete-event simulator: the real
// decision cores (internal/loads over internal/session and
// internal/health) of a whole fleet, wired by an in-memory network on a
// virtual clock, driven by scenario files (internal/scenario).
//
// # Network (Net)
//
// Events sit in one queue ordered by (time, sequence): ties fire in the
// order they were scheduled, so a run is a pure function of its inputs.
// Net.Now is the virtual clock; only Run and Advance move it. Control
// messages cross the network through wire.Append and wire.Decode (nodes
// never share memory); block bytes are copied slot to slot between the
// nodes' stores. Every link has Latency one way (plus each end's
// ExtraDelay), FIFO per direction and per plane (control, data). Each
// node's outgoing data is serialised at Bandwidth (SlowBps while slow);
// a block costs WireBlockBytes on the wire whatever the store's block size.
// The node's connections share its link in turn, a piece at a time (at
// most half a ProgressInterval of transfer, at least a block: link.go), as
// a kernel interleaves flows.
//
// Data plane, per session.DataOp: OpExpect registers a consumer job's
// destination slots; OpOpen starts the producer job, whose writer sends a
// Progress frame (DataProgress at the consumer) at once and every
// ProgressInterval until the job ends; OpSend's blocks leave the producer
// after their transfer time (then SendEnd if Last) and land one latency
// later (DataProgress with the bytes so far, then DataEnd(ok) if Last);
// OpCancel ends the job (SendEnd(false), then DataEnd(false)); OpProbe is
// answered with Table.ProbeAck one round trip later if the data path works
// both ways. Probe, ProbeAck and Progress frames leave their node behind
// the block bytes already queued on their own connection, up to
// SendBuffer (4 MiB) of them: a slow rank answers late, as on a real
// network.
//
// Timers: Table.Tick runs on a grid of Tick from the start. A node with
// something in flight (a handshake, a data job, or Busy set by its engine)
// may tick at every grid point; any other node every IdleTick (its
// heartbeats and idle timers may then run up to IdleTick late; no load can
// see it). Of those points a node is ticked only at the ones where its
// table has something due (loads.Table.NextDeadline) or effects not yet
// performed: a Tick before the deadline is a no-op, so the run is the one
// that ticking at every point gives (TestSkippedTicksSameRun), and an idle
// node costs nothing between its deadlines (wake.go). With Workers > 1 the
// ticks of one grid point run on that many goroutines, then their actions
// are performed in node order: the run is the same.
//
// Connection life: ActClose closes our side, reports DataClosed at once
// (nothing in the simulator can touch a slot after it) and resets the
// peer's side one latency later (ConnLost), unless a blackhole eats the
// RST. A message that reaches a side already closed is answered by a
// reset. A dial to a node that does not exist or has crashed is refused
// (ConnLost after a round trip); into a blackhole it hangs, its SYN
// retransmitted 1, 3, 7, 15 and 31 s after the first (the dialer's
// handshake deadline usually ends it first).
//
// vLLM's transport (VLLMTransport, set by the runner under the "vllm"
// timer set): a dial to an address nobody listens on is not refused but
// retried silently every ZMQReconnect (a ZMQ DEALER), until a listener
// appears or the dialer's handshake deadline closes it; and a load that
// times out faults its connection on both sides (vLLM #64251), failing
// every other load of the session at once.
//
// Faults (scenario.Kinds), per node:
//   - crash: the process and its state are gone; peers see their
//     connections reset; dials are refused; nothing it had queued is
//     delivered. Heal brings the rank back as a fresh node, incarnation+1.
//   - close-control: every connection of the node is reset once, both
//     sides see ConnLost; the process lives on.
//   - blackhole (Silent): nothing in or out, nothing resets; connections
//     stay open; the node itself keeps running its timers.
//   - blackhole-data: data frames in both directions are refused (no
//     bytes, no Progress, no probe answers get through), control still
//     flows. As TCP does, the sender's kernel holds what was refused and
//     sends it again at 0.2 s × (2^k − 1) after the first refusal; the
//     first retransmission that finds the path open delivers it all, in
//     order, and nothing later on that connection overtakes it; one that
//     comes UserTimeout (the heartbeat timeout, as TCP_USER_TIMEOUT) after
//     the first refusal aborts the sender's connection instead, its RST
//     lost in the drop (hold.go). A blackhole treats the data plane the
//     same way (its control messages are still lost).
//   - stall: the process is paused: no events, no ticks, no engine work;
//     what reaches it is queued and delivered in order on heal, before its
//     first tick; its producer jobs send nothing meanwhile.
//   - slow: its outgoing data at BytesPerSec. delay: Latency more on every
//     message and data frame to or from it.
//   - goodbye-idle: each of its sessions, in order, ends as an idle
//     eviction: Goodbye(idle) to the peer, and its own table hears the
//     same goodbye (there is no Table call to evict one session yet), so
//     both sides end with cause goodbye, through the policy's reap.
//   - refuse-handshake: a Hello to or from it reaches the table with a
//     mismatched hash seed, so the session itself refuses it: Goodbye
//     (incompatible), cause incompatible on both sides.
//   - restart: crash, and at once a fresh node with incarnation+1.
//   - heal: ends every fault of the rank (above).
//
// # Runner (Run)
//
// Run builds a node per rank of every pod (peer id pod.PeerID(r), failure
// domain pod.Domain), opens every consumer-source session before time 0
// (Options.Warmup, as a running fleet has them), and drives the
// internal/workload engine (the same one the real-socket demo drives)
// through thin adapters over each node's table, on the Tick grid: Poisson arrivals at workload.rate between
// start and stop (math/rand/v2 PCG seeded by (seed, consumer index)), each
// naming a uniformly chosen source rank. PD: the source registers the
// request as remote_decoder, writes its blocks and SubmitStores after
// PrefillDelay, and finishes it; the consumer registers remote_prefiller
// (remote_domain = the source pod's domain), looks up each step (HIT:
// SubmitLoad, MISS: fallback, RETRY: next step). Symmetric: the source
// holds the blocks already; the consumer looks up every key, EndStep, all
// HIT: load, any MISS: fallback. Mixed: each request one or the other,
// by the seed. A load reported OK is checked byte for byte in the
// consumer's store at once (a mismatch is Corrupt and not a hit).
// After every engine step the runner counts the slots Filling or Pinned
// in the fleet (the peak is reported) and those no job, pin or parked
// store owns (the worst count is reported: see slots.go), looking only at
// the nodes touched since the last count or holding slots then.
// At Duration what is unresolved is Stuck (the report counts it with its
// time so far, censored); then every fault is healed,
// every request finished, every table shut down and drained, and the
// slots still Filling or Pinned are the leaked slots. The report is
// report.Compute's. A run is deterministic for (scenario, policy,
// seed, Options): the same records, the same number of events.
//
// Options.TimerSet runs any policy with either timer set ("vllm" also
// turns on vLLM's transport above) and Options.DropDomains removes every
// pod's domain label from the nodes and the requests: the ablation of
// `kvp2p sim --ablation`. The report still judges by the scenario's pods.
//
// Contract. Net, its nodes and a run are single-goroutine (the tick
// workers aside, which touch disjoint tables and end before the tick
// does). Callers that call a node's Table directly call Net.Flush (or Run
// or Advance) before time moves, so that its actions are performed.
package sim
