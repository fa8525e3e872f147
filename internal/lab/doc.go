// Package lab is the fault lab (`kvp2p lab`): real `kvp2p serve`
// processes on network hosts made with Linux network namespaces, driven
// through the engine API by a driver that plays every rank's engine, with
// faults made by the kernel (signals, nftables, tc, ss -K).
//
// Layout: one namespace per scenario host (kvp2plab-hN, address
// 10.200.0.N+1/16 on its eth0), joined by veth pairs to a bridge in a
// namespace of its own (kvp2plab-br). Nothing is created in the machine's
// own network namespace, and 10.200.0.0/16 exists only inside ours.
//
// Everything the lab makes is named so that it can be found again:
// namespaces kvp2plab-*, files under StateDir and RegionDir. A lock file
// (flock) keeps two labs from running at once; whoever holds it removes
// what a dead predecessor left behind before making anything (Clean).
//
// The engines are internal/workload's, as in the simulator and the demo,
// so all three make the same requests: each rank's calls become engine
// API Steps on its sidecar's Unix socket, and the engine's chunks live in
// a region file the sidecar maps.
//
// Each serve also serves /metrics on its host namespace's loopback
// (MetricsBase+i); the soak reads goroutines and sessions there from a
// thread that enters the namespace (goroutines.go), and every run prints
// how late the driver ran (lag.go), so that a time figure can be told
// from a starved machine's.
//
// command.go is what `kvp2p lab` does once its flags are read and the lab
// is held: which scenarios it can make (Runnable), the runs and their
// table (Execute), and the soak's verdict (PrintSoak).
package lab
