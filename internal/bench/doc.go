// Package bench is kvp2p bench: it measures, on 127.0.0.1 and in one
// process, a PD load through two real nodes against a plain TCP copy of the same bytes, and the
// symmetric lookup round trip next to a raw TCP ping-pong. The four
// measurements are interleaved run by run, so that a ratio compares numbers
// taken under the same noise.
//
// Fleet (fleet.go) is bench --fleet, the saturation curve of N sources and
// one consumer. cmd/kvp2p parses the flags into Options or FleetOptions and
// prints the Report.
package bench
