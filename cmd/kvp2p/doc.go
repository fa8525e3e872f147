// Command kvp2p runs a kvp2p node (serve), the demo, the simulator and
// benchmarks. It is the only place that reads flags, environment and files.
package main
