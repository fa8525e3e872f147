// Package proccpu reads the CPU time this process has used (user plus
// system, every thread), for benchmarks that report CPU cost per byte moved
// next to a baseline measured in the same process: both ends of a loopback
// transfer run here, so the delta around a transfer is what both sides
// spent on it, plus whatever else the process did meanwhile.
package proccpu
