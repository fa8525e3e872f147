// Command kvp2p runs a kvp2p node (serve), asks a running one for its
// state (status), and runs the demo, the simulator and benchmarks. It is
// the only place that reads flags, environment and files.
package main
