// Package faultnet injects faults on real sockets, frame by frame, for the
// demo (docs/design.md §7's fault kinds): a Injector holds the fault state of
// every rank of a fleet, and wraps the connections each rank accepts.
//
// Every rank listens behind a Listener; every connection it accepts is
// a faultConn that knows its local rank (the listener's) and, from the
// first frame (Hello or DataAttach), its remote rank. A fault of a rank
// applies to every connection it is an end of: those it accepted, and
// those it dialed, which are wrapped at the peer's listener. In the demo
// every connection is dialed by a consumer and accepted by a source, so
// both ends of every connection are covered.
//
// faultConn parses the frames going through it in both directions, so that
// it can drop whole frames (the stream stays well formed, as the
// simulator's network drops whole messages) and remember the jobs whose
// data vanished: as in the simulator, a job stream cut by a blackhole stays
// cut after the heal (nothing more of it gets through), while later jobs
// and control traffic flow again.
//
//	blackhole       every frame of every connection of the rank is dropped,
//	                both ways; new connections are accepted but their Hello
//	                vanishes, so dials hang until the handshake timeout.
//	blackhole-data  the same for data connections only.
//	stall           the rank's connections hold still (nothing read, nothing
//	                written, closes deferred) until the heal, then resume in
//	                order: what peers of a paused process see. The rank's
//	                own timers keep running (a Node cannot be paused).
//	slow            the rank's data connections share one link of
//	                bytes_per_sec out of the rank, each behind a 4 MiB send
//	                buffer (link.go): a Probe, ProbeAck or Progress frame
//	                waits behind the block bytes already queued, as on a
//	                real network. Reads of connections the rank dialed are
//	                paced at that rate (their kernel buffers fill behind).
//	delay           every write of the rank's connections, and of its
//	                peers' ends, waits latency first (never the readers).
//	refuse-handshake  a Hello to or from the rank arrives with its hash seed
//	                spoiled, so the receiving node refuses it as
//	                incompatible, as the simulator does.
//	close-control   Injector.Reset: every connection of the rank is closed.
//	goodbye-idle    Injector.Goodbye: see there.
//
// crash and restart are the demo's (Node.Close, a new Node on the port).
//
// Two more act on a rank's data writes at a precise point of a load, for
// the node's own tests (internal/node's, which use this injector too;
// datafaults.go): Injector.PauseData holds the writes after so many bytes
// until Injector.ResumeData, and Injector.CorruptNextChunk flips one
// payload byte of the next chunk, in a copy.
package faultnet
