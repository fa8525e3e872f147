package session

import (
	"testing"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/nodetest/testkeys"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// A producer that drains for shutdown reports a transfer sent (SendEnd →
// TransferDone) and then says Goodbye; its last bytes may still be in the
// data connection. The consumer lets such a load finish from it: the
// producer acknowledged it as served, so it must not be lost.
func TestGoodbyeAfterTransferDoneLetsTheDataLand(t *testing.T) {
	pr := readyPair(t, nil)
	ks := testkeys.Keys("a", 2)
	pr.p.s.AddStoredBlocks(pr.now, "kv", ks, slots(500, 2), 77)
	pr.load(1, "kv", ks, true)
	b := uint64(2) * testBlockBytes
	pr.sendEnd(1, true, b) // TransferDone(true) reaches the consumer first
	pr.c.s.Receive(pr.now, &wire.Goodbye{Reason: wire.GoodbyeShutdown})
	pr.flush()
	if pr.c.s.Ended() != health.CauseGoodbye || !pr.c.s.Lingering() {
		t.Fatalf("ended %v lingering %v, want goodbye and lingering", pr.c.s.Ended(), pr.c.s.Lingering())
	}
	pr.noLoad(1)
	pr.dataEnd(1, true, b) // the data connection delivers the rest
	if r := pr.oneLoad(1); !r.OK {
		t.Fatalf("load the producer reported sent failed after its goodbye: %+v", r)
	}
	if pr.c.s.Lingering() {
		t.Fatal("still lingering with nothing left")
	}
}

// Without the data, the linger ends: StopLinger (or DataClosed) fails the
// load once, and only loads the producer reported sent ever linger.
func TestLingerEnds(t *testing.T) {
	pr := readyPair(t, nil)
	ks := testkeys.Keys("a", 2)
	pr.p.s.AddStoredBlocks(pr.now, "kv", ks, slots(500, 2), 77)
	pr.load(1, "kv", ks, true)
	pr.load(2, "kv2", testkeys.Keys("b", 1), true) // no supply: never reported sent
	pr.sendEnd(1, true, 2*testBlockBytes)
	pr.c.s.Receive(pr.now, &wire.Goodbye{Reason: wire.GoodbyeShutdown})
	pr.flush()
	if r := pr.oneLoad(2); r.OK {
		t.Fatalf("a load never reported sent survived the goodbye: %+v", r)
	}
	pr.noLoad(1)
	pr.c.s.StopLinger(pr.now)
	pr.flush()
	if r := pr.oneLoad(1); r.OK {
		t.Fatalf("linger stopped without data, load OK: %+v", r)
	}
	pr.c.s.DataClosed(pr.now)
	pr.flush()
	pr.oneLoad(1) // still exactly one result
}
