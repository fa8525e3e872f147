//go:build !linux

package wire

import "io"

// newVReader: readv is used on Linux only; elsewhere payloads go through
// bufio as before.
func newVReader(io.Reader) vreader { return nil }
