package kvp2p

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"
)

// startLib serves a node built through the public API on a fresh loopback
// port; it is closed at cleanup.
func startLib(t *testing.T, block int, mut func(*Config)) *Node {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{PeerID: ln.Addr().String(), BlockBytes: block, Slots: 16, HashSeed: "s"}
	if mut != nil {
		mut(&cfg)
	}
	n, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- n.Serve(ln) }()
	t.Cleanup(func() {
		n.Close()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
		if _, err := n.Status(context.Background()); !errors.Is(err, ErrClosed) {
			t.Errorf("status after close: %v, want ErrClosed", err)
		}
	})
	return n
}

// TestLibraryFindSource: with Config.Find on, a node finds through the
// public API the peer that holds a block, with no request naming it.
func TestLibraryFindSource(t *testing.T) {
	const block = 4096
	on := func(peers string) func(*Config) {
		return func(c *Config) { c.Find = FindConfig{Enabled: true, Peers: peers, Interval: 50 * time.Millisecond} }
	}
	p := startLib(t, block, on(""))
	c := startLib(t, block, on(p.PeerID()))
	k := Key{4, 5, 6}
	if err := p.Manager().PutBlock(k, bytes.Repeat([]byte{9}, block)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		f, ok := c.Manager().FindSource([]Key{k}, 0)
		if ok && f == (Found{Peer: p.PeerID(), Blocks: 1}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never found %s: last %+v %v", p.PeerID(), f, ok)
		}
		<-time.After(20 * time.Millisecond)
	}
}

// TestLibraryLoad: two nodes through the public API only, on loopback: a
// block put and offered on one is looked up and loaded by the other, and
// both report their sessions in Status.
func TestLibraryLoad(t *testing.T) {
	const block = 4096
	p, c := startLib(t, block, nil), startLib(t, block, nil)
	k := Key{1, 2, 3}
	data := bytes.Repeat([]byte{7}, block)
	pm, cm := p.Manager(), c.Manager()
	if err := pm.PutBlock(k, data); err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(p.PeerID())
	pn, _ := strconv.Atoi(port)
	if err := cm.NewRequest("r", TransferParams{RemoteKVSource: &Remote{KVRequestID: "kv", RemoteHost: host, RemotePort: pn}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v := cm.Lookup("r", k)
	for ; v == Retry && ctx.Err() == nil; v = cm.Lookup("r", k) {
		cm.EndStep() // the step's probes leave
		wctx, wcancel := context.WithTimeout(ctx, 20*time.Millisecond)
		v = cm.LookupWait(wctx, "r", k)
		wcancel()
		if v != Retry {
			break
		}
	}
	if v != Hit {
		t.Fatalf("lookup: %v, want HIT", v)
	}
	j, err := cm.SubmitLoad("r", []Key{k})
	if err != nil {
		t.Fatal(err)
	}
	rs := cm.WaitFinished(ctx)
	if len(rs) != 1 || rs[0].Job != j || rs[0].Kind != JobLoad || !rs[0].OK || rs[0].Bytes != block {
		t.Fatalf("results %+v, want job %d loaded %d bytes", rs, j, block)
	}
	if got, ok := cm.ReadBlock(k); !ok || !bytes.Equal(got, data) {
		t.Fatalf("read back: present %v", ok)
	}
	s, err := c.Status(ctx)
	if err != nil || s.SessionCount("ready") != 1 {
		t.Fatalf("status: %v, ready sessions %d", err, s.SessionCount("ready"))
	}
	if st, err := cm.Stats(); err != nil || st.Ready != 1 {
		t.Fatalf("stats %+v, %v", st, err)
	}
	cm.RequestFinished("r")
}
