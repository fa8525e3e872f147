// Package rawbench holds what the Go benchmarks that compare kvp2p with raw
// TCP share: a plain TCP copy of the same bytes on 127.0.0.1 (Raw) and the
// interleaving of two measured runs per op, so that both see the same
// machine noise and are reported as a ratio (Interleave). Test code only;
// nothing in the node imports it.
package rawbench
