// Package demo runs a scenario on real sockets: a fleet of kvp2p nodes on
// 127.0.0.1 (fleet.go), one per rank, driven by the same workload engine as
// the simulator (run.go), with the scenario's faults injected frame by
// frame by internal/faultnet, crashes and restarts done on the nodes
// themselves, and an optional mutual-TLS fleet (tls.go). Its Result carries
// the simulator's report format plus the harness's own figures (stats.go).
//
// demo.go is the command around the runs: the built-in demo's scenario and
// story, the policies side by side or one after another (memory allowing),
// progress, and the table (Execute); status.go serves each run's first
// consumer's status page (--metrics-addr). cmd/kvp2p only reads the flags.
package demo
