package node

import (
	"slices"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest"
)

// TestBlockChangedAfterPutFailsLoad: Put takes a block's CRC32Cs and loads
// send those (store/sums.go), so the check covers the block from Put to the
// consumer's slot. A byte of the producer's stored block that changes after
// Put (nothing in kvp2p writes a Ready slot: a stray write or a memory fault)
// fails every load of it as corrupt, and none of its bytes become readable;
// a fresh Put of the same key loads intact. With sums taken at send time
// (the old scheme) the changed block would load "OK".
func TestBlockChangedAfterPutFailsLoad(t *testing.T) {
	// 16 KiB chunks: four chunks, and four stored sums, per 64 KiB block.
	small := func(c *Config) { c.ChunkBytes = 16 << 10 }
	p := startTN(t, nodeOpt{mut: small})
	c := startTN(t, nodeOpt{mut: small})
	warm(t, c, p)
	ks := nodetest.Keys("rot", 8)
	storeBlocks(t, p, "kv1", ks)
	// Change one byte in the third chunk of block 5, in the producer's store.
	if err := p.m.do(func(time.Time) {
		sl, ok := p.st.Lookup(ks[5])
		if !ok {
			t.Error("block 5 not in the producer's store")
			return
		}
		if len(p.st.Sums(sl)) != 4 {
			t.Errorf("block 5 has %d stored sums, want 4", len(p.st.Sums(sl)))
		}
		p.st.Bytes(sl)[2*(16<<10)+100] ^= 0x01
	}); err != nil {
		t.Fatal(err)
	}
	c.m.NewRequest("d1", nodetest.PDParams(t, "kv1", p.PeerID()))
	lj, _ := c.m.SubmitLoad("d1", ks)
	if r := waitResult(t, c.m, lj, 5*time.Second); r.OK {
		t.Fatalf("load of a block changed after Put reported OK: %+v", r)
	}
	waitLog(t, c, "corrupt chunk")
	waitQuiet(t, c.m)
	if st, _ := c.m.Stats(); st.Ready != 0 {
		t.Fatalf("a block of the corrupt load was committed: %+v", st)
	}
	c.m.RequestFinished("d1")
	p.m.RequestFinished("p-kv1")

	// Put again: new bytes, new sums; the load is intact.
	storeBlocks(t, p, "kv2", ks)
	c.m.NewRequest("d2", nodetest.PDParams(t, "kv2", p.PeerID()))
	if v := waitVerdict(t, c.m, "d2", ks[0]); v != Hit {
		t.Fatalf("lookup after the corrupt load = %v", v)
	}
	lj2, _ := c.m.SubmitLoad("d2", ks)
	if r := waitResult(t, c.m, lj2, 5*time.Second); !r.OK {
		t.Fatalf("reload: %+v", r)
	}
	checkBlocks(t, c.m, ks)
}

// TestLoadedBlockKeepsSums: a block a load filled keeps the sums its chunks
// were checked against (the producer chunks as the consumer pieces), so a
// node that serves a block it loaded sends those sums instead of summing
// cold bytes, and the check still covers the block from the first Put to
// the last consumer: a byte of the middle node's copy that changes after
// the load fails the second hop as corrupt.
func TestLoadedBlockKeepsSums(t *testing.T) {
	small := func(c *Config) { c.ChunkBytes = 16 << 10 }
	a := startTN(t, nodeOpt{mut: small})
	b := startTN(t, nodeOpt{mut: small})
	c := startTN(t, nodeOpt{mut: small})
	warm(t, b, a)
	warm(t, c, b)
	ks := nodetest.Keys("hop", 4)
	storeBlocks(t, a, "kv1", ks)
	b.m.NewRequest("d1", nodetest.PDParams(t, "kv1", a.PeerID()))
	lj, _ := b.m.SubmitLoad("d1", ks)
	if r := waitResult(t, b.m, lj, 5*time.Second); !r.OK {
		t.Fatalf("first hop: %+v", r)
	}
	checkBlocks(t, b.m, ks)
	b.m.RequestFinished("d1")
	a.m.RequestFinished("p-kv1")

	// b's copies carry the sums of their pieces; change one byte of block 2.
	if err := b.m.do(func(time.Time) {
		for i, k := range ks {
			sl, ok := b.st.Lookup(k)
			if !ok {
				t.Errorf("block %d not in b's store", i)
				return
			}
			got := b.st.Sums(sl)
			if want := nodetest.PieceSums(b.st.Bytes(sl), 16<<10); !slices.Equal(got, want) {
				t.Errorf("block %d: kept sums %x, want %x", i, got, want)
			}
		}
		sl, _ := b.st.Lookup(ks[2])
		b.st.Bytes(sl)[3*(16<<10)+7] ^= 0x01
	}); err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		return
	}
	// The second hop: b serves what it loaded (no Put), c loads it.
	if err := b.m.NewRequest("p-kv2", TransferParams{RemoteDecoder: &Remote{KVRequestID: "kv2"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.m.SubmitStore("p-kv2", ks); err != nil {
		t.Fatal(err)
	}
	c.m.NewRequest("d2", nodetest.PDParams(t, "kv2", b.PeerID()))
	lj2, _ := c.m.SubmitLoad("d2", ks)
	if r := waitResult(t, c.m, lj2, 5*time.Second); r.OK {
		t.Fatalf("second hop of a block changed after its load reported OK: %+v", r)
	}
	waitLog(t, c, "corrupt chunk")
}
