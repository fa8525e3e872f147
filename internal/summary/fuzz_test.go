package summary

import (
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/wire"
)

// FuzzApply: any sequence of decodable Summary parts is applied or refused
// with an error, never a panic, never more than the bound in memory, and
// Find over the result never panics.
func FuzzApply(f *testing.F) {
	p, _ := NewProducer(100, 1)
	_ = p.Store(3, wire.Key{1})
	var seed []byte
	for _, parts := range [][]wire.Summary{p.Snapshot(), p.Flush()} {
		for i := range parts {
			b, _ := wire.Append(nil, &parts[i])
			seed = append(seed, b...)
		}
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, b []byte) {
		const bound = 64
		x := NewIndex(bound)
		for len(b) >= 6 {
			n := int(b[0])%64 + 2 // a short frame: version, type, up to 63 bytes of body
			if n > len(b) {
				n = len(b)
			}
			m, err := wire.Decode(wire.TypeSummary, b[2:n], wire.DefaultLimits())
			peer := string(rune('a' + b[1]%3))
			b = b[n:]
			if err != nil {
				continue
			}
			_ = x.Apply(peer, m.(*wire.Summary), time.Time{})
			if x.Bytes() > 3*(8*bound+200) {
				t.Fatalf("holding %d bytes", x.Bytes())
			}
		}
		x.Find(Query{Keys: []wire.Key{{1}, {2}}})
	})
}
