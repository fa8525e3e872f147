// Package demo runs a scenario on real sockets: a fleet of kvp2p nodes on
// 127.0.0.1 (fleet.go), one per rank, driven by the same workload engine as
// the simulator (run.go), with the scenario's faults injected frame by
// frame by internal/faultnet, crashes and restarts done on the nodes
// themselves, and an optional mutual-TLS fleet (tls.go). Its Result carries
// the simulator's report format plus the harness's own figures (stats.go);
// cmd/kvp2p's demo command parses the flags, runs the policies and prints.
package demo
