// Command embed is a Go program that embeds kvp2p: two nodes in one
// process, on loopback, standing in for two engine ranks. The producer's
// engine has computed the KV blocks of a prompt's prefix; the consumer's
// engine gets a longer prompt that shares it. The consumer looks its
// blocks up on the producer, loads the hits, computes the rest itself, and
// then, with the producer gone, falls back to computing everything.
//
//	go run ./examples/embed
//
// It imports only the kvp2p package and the standard library: what a
// program that embeds the library links (no gRPC, no Prometheus).
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log"
	"net"
	"strconv"
	"time"

	"github.com/kvp2p/kvp2p"
)

const blockBytes = 64 << 10

func main() {
	log.SetFlags(0)
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	producer, err := start(ctx)
	if err != nil {
		return err
	}
	consumer, err := start(ctx)
	if err != nil {
		producer.stop()
		return err
	}
	defer consumer.stop()

	// The producer's engine prefilled a 6-block prompt: it puts the blocks
	// into its node's store, where peers can look them up.
	shared := chain(nil, "You are a helpful assistant.", 6)
	for _, k := range shared {
		if err := producer.m.PutBlock(k, kv(k)); err != nil {
			return err
		}
	}

	// The consumer's prompt extends it by two blocks; its request names
	// the producer as its KV source (vLLM's kv_transfer_params).
	prompt := chain(shared, "Summarise kvp2p.", 2)
	if err := serveRequest(ctx, consumer, "req-1", prompt, producer.n.PeerID()); err != nil {
		return err
	}

	// The producer goes away. The next request's lookups answer MISS (the
	// engine prefills instead of waiting for a dead peer).
	producer.stop()
	prompt = chain(shared, "And again.", 1)
	if err := serveRequest(ctx, consumer, "req-2", prompt, producer.n.PeerID()); err != nil {
		return err
	}

	st, err := consumer.m.Stats()
	if err != nil {
		return err
	}
	fmt.Printf("consumer store: %d blocks ready, %d slots free\n", st.Ready, st.Free)
	return nil
}

// node is a running node and its engine-facing API.
type node struct {
	n      *kvp2p.Node
	m      *kvp2p.Manager
	served chan error
	done   bool
}

// start runs a node on a free loopback port until stop.
func start(ctx context.Context) (*node, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	n, err := kvp2p.NewNode(kvp2p.Config{
		PeerID:     ln.Addr().String(),
		BlockBytes: blockBytes,
		Slots:      64,
		HashSeed:   "example", // the engines' prefix-hash seed: equal on every rank
	})
	if err != nil {
		ln.Close()
		return nil, err
	}
	nd := &node{n: n, m: n.Manager(), served: make(chan error, 1)}
	go func() { nd.served <- n.Serve(ln) }()
	return nd, nil
}

// stop drains the node (its peers get a Goodbye) and waits for Serve.
func (nd *node) stop() {
	if nd.done {
		return
	}
	nd.done = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := nd.n.Shutdown(ctx); err != nil && !errors.Is(err, kvp2p.ErrClosed) {
		log.Print(err)
	}
	if err := <-nd.served; err != nil {
		log.Print(err)
	}
}

// serveRequest does what an engine's connector does for one request: look
// the prompt's blocks up on src, load the longest prefix of hits, check
// them, compute the rest and put them into the store for other ranks.
func serveRequest(ctx context.Context, nd *node, reqID string, prompt []kvp2p.Key, src string) error {
	host, port, err := net.SplitHostPort(src)
	if err != nil {
		return err
	}
	portNum, _ := strconv.Atoi(port)
	p := kvp2p.TransferParams{RemoteKVSource: &kvp2p.Remote{KVRequestID: reqID, RemoteHost: host, RemotePort: portNum}}
	if err := nd.m.NewRequest(reqID, p); err != nil {
		return err
	}
	defer nd.m.RequestFinished(reqID)

	hits := 0
	for _, v := range lookup(ctx, nd.m, reqID, prompt) {
		if v != kvp2p.Hit {
			break
		}
		hits++
	}
	var loaded uint64
	if hits > 0 {
		job, err := nd.m.SubmitLoad(reqID, prompt[:hits])
		if err != nil {
			return err
		}
		r, err := wait(ctx, nd.m, job)
		if err != nil {
			return err
		}
		if !r.OK {
			// A failed load is a fallback, not an error: compute them all.
			fmt.Printf("%s: load failed (%s): computing every block\n", reqID, r.Reason)
			hits = 0
		}
		loaded = r.Bytes
	}
	var buf []byte
	for _, k := range prompt[:hits] {
		var ok bool
		if buf, ok = nd.m.ReadBlockInto(buf[:0], k); !ok || !bytes.Equal(buf, kv(k)) {
			return fmt.Errorf("%s: block %x: loaded bytes differ from the producer's", reqID, k[:4])
		}
	}
	for _, k := range prompt[hits:] {
		if err := nd.m.PutBlock(k, kv(k)); err != nil { // the engine's prefill
			return err
		}
	}
	if hits == 0 {
		fmt.Printf("%s: %d blocks: none loaded from %s, %d computed\n", reqID, len(prompt), src, len(prompt))
	} else {
		fmt.Printf("%s: %d blocks: %d loaded from %s (%d bytes), %d computed\n",
			reqID, len(prompt), hits, src, loaded, len(prompt)-hits)
	}
	return nil
}

// lookup asks for keys' verdicts as an engine's scheduler does: every step
// it looks up the keys not answered yet, then ends the step, when the
// step's probes leave. A verdict is RETRY until the peer has answered.
func lookup(ctx context.Context, m *kvp2p.Manager, reqID string, keys []kvp2p.Key) []kvp2p.Verdict {
	vs := make([]kvp2p.Verdict, len(keys))
	for ctx.Err() == nil {
		retry := -1
		for i, k := range keys {
			if vs[i] == kvp2p.Retry {
				if vs[i] = m.Lookup(reqID, k); vs[i] == kvp2p.Retry {
					retry = i
				}
			}
		}
		if retry < 0 {
			break
		}
		m.EndStep()
		// Nothing else to schedule: wait up to a step for an answer.
		step, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		m.LookupWait(step, reqID, keys[retry])
		cancel()
	}
	return vs
}

// wait returns job's result.
func wait(ctx context.Context, m *kvp2p.Manager, job uint64) (kvp2p.JobResult, error) {
	for {
		for _, r := range m.WaitFinished(ctx) {
			if r.Job == job {
				return r, nil
			}
		}
		if ctx.Err() != nil {
			return kvp2p.JobResult{}, fmt.Errorf("job %d: %w", job, ctx.Err())
		}
	}
}

// chain extends prefix by n block keys of text: each key hashes its
// predecessor with the block's tokens, as an engine's prefix cache does,
// so equal prefixes give equal keys on every rank.
func chain(prefix []kvp2p.Key, text string, n int) []kvp2p.Key {
	keys := append([]kvp2p.Key(nil), prefix...)
	var prev kvp2p.Key
	if len(keys) > 0 {
		prev = keys[len(keys)-1]
	}
	for i := range n {
		h := sha256.Sum256(fmt.Appendf(prev[:], "%s/%d", text, i))
		copy(prev[:], h[:])
		keys = append(keys, prev)
	}
	return keys
}

// kv stands in for a block's KV-cache bytes: a function of its key, so
// that the consumer can check what it loaded.
func kv(k kvp2p.Key) []byte {
	b := make([]byte, blockBytes)
	for i := range b {
		b[i] = k[i%len(k)] ^ byte(i>>8)
	}
	return b
}
