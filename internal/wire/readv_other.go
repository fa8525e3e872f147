//go:build !linux

package wire

import "io"

// newVReader: readv is used on Linux only; elsewhere payloads go through
// the Reader's buffer (straight into the slot when larger than it).
func newVReader(io.Reader) vreader { return nil }
