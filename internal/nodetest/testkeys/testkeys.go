// Package testkeys makes the block keys tests use: SHA-256s of a prefix
// name and an index, so that keys spread over the hash ring as real ones
// do. It imports only internal/wire, so that the tests of the core's own
// packages (session, below loads) can use it where internal/nodetest,
// which imports loads, would be an import cycle. Only tests import it.
package testkeys

import (
	"crypto/sha256"
	"fmt"

	"github.com/kvp2p/kvp2p/internal/wire"
)

// Key is block i of prefix p's keys.
func Key(p string, i int) wire.Key {
	h := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", p, i)))
	var k wire.Key
	copy(k[:], h[:])
	return k
}

// Keys is Key(p, 0) to Key(p, n-1).
func Keys(p string, n int) []wire.Key {
	ks := make([]wire.Key, n)
	for i := range ks {
		ks[i] = Key(p, i)
	}
	return ks
}
