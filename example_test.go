package kvp2p_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"net"
	"strconv"
	"time"

	"github.com/kvp2p/kvp2p"
)

// start runs a node on a free loopback port; stop shuts it down.
func start() (n *kvp2p.Node, stop func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	n, err = kvp2p.NewNode(kvp2p.Config{PeerID: ln.Addr().String(), BlockBytes: 4096, Slots: 16})
	if err != nil {
		log.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- n.Serve(ln) }()
	return n, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := n.Shutdown(ctx); err != nil {
			log.Fatal(err)
		}
		if err := <-served; err != nil {
			log.Fatal(err)
		}
	}
}

// Two nodes in one process: the producer's engine computed a block, the
// consumer's engine needs it and one block nobody has. The consumer looks
// both up in one scheduler step, loads the hit from the producer and
// would prefill the miss itself.
func Example() {
	producer, stopProducer := start()
	defer stopProducer()
	consumer, stopConsumer := start()
	defer stopConsumer()

	shared, unknown := kvp2p.Key{1}, kvp2p.Key{2}
	block := bytes.Repeat([]byte("kv"), 2048) // BlockBytes
	if err := producer.Manager().PutBlock(shared, block); err != nil {
		log.Fatal(err)
	}

	// The request names the producer as its KV source (vLLM's
	// kv_transfer_params["remote_kv_source"]).
	host, port, _ := net.SplitHostPort(producer.PeerID())
	portNum, _ := strconv.Atoi(port)
	m := consumer.Manager()
	src := &kvp2p.Remote{KVRequestID: "req-1", RemoteHost: host, RemotePort: portNum}
	if err := m.NewRequest("req-1", kvp2p.TransferParams{RemoteKVSource: src}); err != nil {
		log.Fatal(err)
	}
	defer m.RequestFinished("req-1")

	// Scheduler steps: a lookup answers RETRY until the producer has; a
	// step's probes leave when it ends (the first step also dials).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var v1, v2 kvp2p.Verdict // RETRY
	for (v1 == kvp2p.Retry || v2 == kvp2p.Retry) && ctx.Err() == nil {
		v1, v2 = m.Lookup("req-1", shared), m.Lookup("req-1", unknown)
		m.EndStep()
		// Nothing else to schedule: wait up to a step for an answer.
		step, stepDone := context.WithTimeout(ctx, 20*time.Millisecond)
		m.LookupWait(step, "req-1", shared)
		stepDone()
	}
	fmt.Println("verdicts:", v1, v2)

	// Load the hit; the miss is the engine's to compute.
	if _, err := m.SubmitLoad("req-1", []kvp2p.Key{shared}); err != nil {
		log.Fatal(err)
	}
	for _, r := range m.WaitFinished(ctx) {
		fmt.Printf("load ok=%v bytes=%d\n", r.OK, r.Bytes)
	}
	got, ok := m.ReadBlock(shared)
	fmt.Println("same bytes:", ok && bytes.Equal(got, block))
	// Output:
	// verdicts: HIT MISS
	// load ok=true bytes=4096
	// same bytes: true
}
