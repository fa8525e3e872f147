package node

import (
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/wire"
)

// Issue 34, attack 2: a stolen hand-off. A peer under its own valid
// identity sends a Fetch naming a PD kv request id a prefiller parked for
// a decoder: it received the blocks (128 KiB), and the real decoder's load
// of that id then failed after 30 s. docs/security.md says who may fetch.

// stealHandoff makes an attacker session (a valid plain-TCP identity on
// the producer's host) fetch kv's blocks before the decoder does; it
// returns the KV bytes (chunk payloads) the attacker's data connection
// received, and the attacker.
func stealHandoff(t *testing.T, p *tnode, kv string, ks []Key) (stolen int64, sp *spoofer) {
	t.Helper()
	sp = startSpoofer(t, p.PeerID(), "127.0.0.1:39001", nil)
	select {
	case <-sp.ready:
	case <-time.After(5 * time.Second):
		t.Fatal("attacker got no session")
	}
	got := make(chan int64, 1)
	go func() {
		var n int64
		rd := wire.NewReader(sp.data, wire.DefaultLimits())
		for {
			m, err := rd.Next()
			if err != nil {
				got <- n
				return
			}
			if ch, ok := m.(*wire.Chunk); ok {
				n += int64(ch.Len)
				if rd.DiscardPayload() != nil {
					got <- n
					return
				}
			}
		}
	}()
	slots := make([]uint32, len(ks))
	for i := range slots {
		slots[i] = uint32(i)
	}
	sp.send(sp.ctl, &wire.Fetch{ReqID: kv, Round: 0, Job: 1, Keys: ks, Slots: slots})
	// What the producer sends comes within a round trip; a second is many.
	<-time.After(time.Second)
	sp.data.Close()
	return <-got, sp
}

// decoderLoad is the decoder c's PD load of kv's blocks ks from p: its
// result, and how long the request took from its start.
func decoderLoad(t *testing.T, c, p *tnode, kv string, ks []Key) (JobResult, time.Duration) {
	t.Helper()
	start := time.Now()
	if err := c.m.NewRequest("d1", nodetest.PDParams(t, kv, p.PeerID())); err != nil {
		t.Fatal(err)
	}
	if v := waitVerdict(t, c.m, "d1", ks[0]); v != Hit {
		t.Fatalf("decoder's lookup = %v, want HIT", v)
	}
	j, _ := c.m.SubmitLoad("d1", ks)
	r := waitResult(t, c.m, j, 10*time.Second)
	return r, time.Since(start)
}

// TestAttackStolenHandoffNamedDecoder: the prefiller's remote_decoder
// names the decoder, so the attacker's fetch is refused at once and gets
// 0 bytes, and the decoder's load then succeeds with the prefiller's bytes.
func TestAttackStolenHandoffNamedDecoder(t *testing.T) {
	p := startTN(t, nodeOpt{})
	c := startTN(t, nodeOpt{})
	ks := nodetest.Keys("handoff", 4)
	for _, k := range ks {
		if err := p.m.PutBlock(k, nodetest.Bytes(k)); err != nil {
			t.Fatal(err)
		}
	}
	const kv = "kv-handoff-named-0123456789"
	host, port := nodetest.SplitPeer(t, c.PeerID())
	if err := p.m.NewRequest("p1", TransferParams{RemoteDecoder: &Remote{KVRequestID: kv, RemoteHost: host, RemotePort: port}}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.m.SubmitStore("p1", ks); err != nil {
		t.Fatal(err)
	}
	stolen, _ := stealHandoff(t, p, kv, ks)
	r, took := decoderLoad(t, c, p, kv, ks)
	t.Logf("stolen hand-off, decoder named: the attacker got %d bytes; the decoder's load ok=%v in %v",
		stolen, r.OK, took.Round(time.Millisecond))
	if stolen != 0 {
		t.Fatalf("the attacker received %d bytes of a hand-off that names its decoder", stolen)
	}
	if !r.OK {
		t.Fatalf("the decoder's load failed: %+v", r)
	}
	checkBlocks(t, c.m, ks)
	if !strings.Contains(p.logs.String(), "not its decoder") {
		t.Fatal("the producer did not say why it refused the attacker's fetch")
	}
}

// TestAttackStolenHandoffCapability: remote_decoder names only the kv
// request id, a capability; an attacker that knows it fetches first. The
// decoder's own fetch is then refused at once and the producer says why:
// its load fails within seconds, not at the 30 s load timeout.
func TestAttackStolenHandoffCapability(t *testing.T) {
	p := startTN(t, nodeOpt{})
	c := startTN(t, nodeOpt{mut: func(cfg *Config) { cfg.Timers.LoadTimeoutPD = 30 * time.Second }})
	ks := nodetest.Keys("capability", 4)
	const kv = "kv-handoff-capability-01234"
	storeBlocks(t, p, kv, ks)
	stolen, sp := stealHandoff(t, p, kv, ks)
	defer sp.ctl.Close()
	r, took := decoderLoad(t, c, p, kv, ks)
	t.Logf("stolen hand-off, id only: the attacker got %d bytes; the decoder's load ok=%v in %v (%s)",
		stolen, r.OK, took.Round(time.Millisecond), r.Reason)
	if r.OK {
		t.Fatal("the decoder loaded blocks the attacker's fetch had taken")
	}
	if !strings.Contains(p.logs.String(), "second peer") {
		t.Fatal("the producer did not say why it refused the decoder's fetch")
	}
}
