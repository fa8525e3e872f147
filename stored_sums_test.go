package kvp2p

import (
	"testing"
	"time"
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
	ks := keysOf("rot", 8)
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
	c.m.NewRequest("d1", pdParams(t, "kv1", p))
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
	c.m.NewRequest("d2", pdParams(t, "kv2", p))
	if v := waitVerdict(t, c.m, "d2", ks[0]); v != Hit {
		t.Fatalf("lookup after the corrupt load = %v", v)
	}
	lj2, _ := c.m.SubmitLoad("d2", ks)
	if r := waitResult(t, c.m, lj2, 5*time.Second); !r.OK {
		t.Fatalf("reload: %+v", r)
	}
	checkBlocks(t, c.m, ks)
}
