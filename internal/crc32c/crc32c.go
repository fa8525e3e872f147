package crc32c

import "hash/crc32"

// minFold is the shortest buffer worth folding: the fold's setup and its
// final reduction cost about what the instruction loop does on this much.
const minFold = 512

// Update returns the CRC32C of p appended to the data whose CRC32C is crc,
// as crc32.Update(crc, crc32.MakeTable(crc32.Castagnoli), p).
func Update(crc uint32, p []byte) uint32 {
	if len(p) >= minFold && haveFold {
		n := len(p) &^ 15
		// fold takes and returns the register, not its complement.
		crc = ^fold(^crc, p[:n])
		p = p[n:]
	}
	return crc32.Update(crc, crc32.MakeTable(crc32.Castagnoli), p)
}

// Checksum returns the CRC32C of p.
func Checksum(p []byte) uint32 { return Update(0, p) }
