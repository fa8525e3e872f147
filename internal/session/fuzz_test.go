package session

import (
	"bytes"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/nodetest/testkeys"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// FuzzSessionReceive feeds a ready session any sequence of control frames
// a peer could send, interleaved with ticks, then ends it: the session
// never panics, and once its data path is closed every pin a lookup took
// is returned (a hostile peer cannot leak the store).
func FuzzSessionReceive(f *testing.F) {
	ks := testkeys.Keys("fz", 4)
	var seed []byte
	for _, m := range []wire.Message{
		&wire.Lookup{ReqID: "r", Round: 1, Keys: ks},
		&wire.Lookup{ReqID: "r", Round: 1, Keys: ks[:2]},
		&wire.Fetch{ReqID: "r", Round: 1, Job: 7, Keys: ks[:2], Slots: []uint32{1, 2}},
		&wire.Abort{ReqID: "r", Round: 1, Job: 7},
		&wire.Fetch{ReqID: "pd", Job: 8, Keys: ks[2:], Slots: []uint32{3, 4}},
		&wire.Fetch{ReqID: "r", Round: 1},
		&wire.TransferDone{ReqID: "x", Job: 1, Success: true},
		&wire.LookupResp{ReqID: "y", Round: 1, Keys: ks[:1], Hits: []bool{true}},
		&wire.Ping{Seq: 1},
		&wire.Goodbye{Reason: wire.GoodbyeIdle},
	} {
		seed, _ = wire.Append(seed, m)
	}
	f.Add(seed, uint8(0))
	f.Add(seed[:len(seed)/2], uint8(3))
	f.Fuzz(func(t *testing.T, stream []byte, ticks uint8) {
		pr := readyPair(t, nil)
		pr.p.blocks.add(ks...)
		pr.p.blocks.pending[testkeys.Key("fz-pending", 0)] = true
		rd := wire.NewReader(bytes.NewReader(stream), wire.DefaultLimits())
		for range 256 {
			m, err := rd.Next()
			if err != nil {
				break
			}
			if c, ok := m.(*wire.Chunk); ok {
				if c.Len > 0 && rd.DiscardPayload() != nil {
					break
				}
				continue // data frames never reach a session
			}
			pr.p.s.Receive(pr.now, m)
			pr.p.collect(t)
			for range ticks % 4 {
				pr.now = pr.now.Add(7 * time.Second)
				pr.p.s.Tick(pr.now)
				pr.p.collect(t)
			}
		}
		pr.p.s.Close(pr.now, health.CauseConnReset)
		pr.p.s.DataClosed(pr.now)
		pr.p.collect(t)
		if n := pr.p.blocks.pinned(); n != 0 {
			t.Fatalf("%d pins held after the session ended", n)
		}
	})
}
