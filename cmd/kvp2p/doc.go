// Command kvp2p runs a kvp2p node (serve), asks a running one for its
// state (status), and runs the demo, the fault lab, the simulator and
// benchmarks. It is the only place that reads flags, environment and
// files and handles process signals; it only wires: each command's work
// is an internal package's (docs/architecture.md, "Around the core").
package main
