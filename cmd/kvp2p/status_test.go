package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/metrics"
	"github.com/kvp2p/kvp2p/internal/node"
	"github.com/kvp2p/kvp2p/internal/nodetest"
)

// TestStatusAgainstServe runs `kvp2p serve --metrics-addr`, opens a
// session to it from a second node, and reads it back with `kvp2p
// status` as text, as JSON and with --watch.
func TestStatusAgainstServe(t *testing.T) {
	cfg := nodetest.WriteConfig(t, "peer_id: 127.0.0.1:7600\nfailure_domain: pod-served\nslots: 16\nblock_bytes: 65536\nhash_seed: s\ntimers:\n  shutdown_drain: 100ms\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := &logWatch{want: `"msg":"serving"`, seen: make(chan string, 1)}
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"serve", "--config", cfg, "--listen", "127.0.0.1:0",
			"--metrics-addr", "127.0.0.1:0", "--log-format", "json"}, io.Discard, stderr)
	}()
	var line string
	select {
	case line = <-stderr.seen:
	case code := <-exited:
		t.Fatalf("serve exited %d before serving:\n%s", code, stderr)
	}
	var rec struct{ Addr string }
	if err := json.Unmarshal([]byte(line), &rec); err != nil {
		t.Fatal(err)
	}
	maddr := metricsAddrFrom(t, stderr.String())

	// A consumer dials the served node (its peer id is a fixed example;
	// Dial maps it to the port it really took).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c, err := node.New(node.Config{PeerID: ln.Addr().String(), FailureDomain: "pod-consumer", Slots: 16,
		BlockBytes: 65536, HashSeed: "s", Dial: func(string) string { return rec.Addr }})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- c.Serve(ln) }()
	defer func() { c.Close(); <-served }()
	m := c.Manager()
	params := node.TransferParams{RemotePrefiller: &node.Remote{KVRequestID: "kv", RemoteHost: "127.0.0.1", RemotePort: 7600}}
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; ; i++ {
		m.NewRequest("r", params)
		v := m.Lookup("r", node.Key{1})
		m.RequestFinished("r")
		if v == node.Hit {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no session to the served node")
		}
		<-time.After(10 * time.Millisecond)
	}

	var out, errb bytes.Buffer
	if code := run(ctx, []string{"status", "--addr", maddr}, &out, &errb); code != 0 {
		t.Fatalf("status exited %d: %s", code, errb.String())
	}
	text := out.String()
	t.Logf("kvp2p status:\n%s", text)
	for _, want := range []string{"node 127.0.0.1:7600", "domain pod-served", "policy domain", "ready",
		"pod-consumer", ln.Addr().String(), "#1 in", "LOADS IN FLIGHT (0)"} {
		if !strings.Contains(text, want) {
			t.Errorf("status output lacks %q:\n%s", want, text)
		}
	}

	out.Reset()
	if code := run(ctx, []string{"status", "--addr", maddr, "--json"}, &out, &errb); code != 0 {
		t.Fatalf("status --json exited %d: %s", code, errb.String())
	}
	var s metrics.Snapshot
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out.String())
	}
	if s.Node.PeerID != "127.0.0.1:7600" || len(s.Domains) != 1 || s.Domains[0].Name != "pod-consumer" ||
		len(s.Domains[0].Peers) != 1 || s.Domains[0].Peers[0].ID != ln.Addr().String() ||
		len(s.Domains[0].Peers[0].Sessions) != 1 || s.Domains[0].Peers[0].Sessions[0].State != "ready" {
		t.Errorf("status --json: %+v", s)
	}

	// --watch refreshes until interrupted: stop it after three frames.
	wctx, wcancel := context.WithCancel(ctx)
	w := &frameCounter{want: 3, done: wcancel}
	if code := run(wctx, []string{"status", "--addr", maddr, "--watch", "--interval", "10ms"}, w, &errb); code != 0 {
		t.Fatalf("status --watch exited %d: %s", code, errb.String())
	}
	if n := w.count(); n < 3 {
		t.Fatalf("--watch printed %d frames", n)
	}

	// Nobody listening: a clear error, exit 1.
	errb.Reset()
	if code := run(ctx, []string{"status", "--addr", "127.0.0.1:1", "--timeout", "1s"}, io.Discard, &errb); code != 1 ||
		!strings.Contains(errb.String(), "kvp2p status:") {
		t.Fatalf("status against nothing: exit %d, %q", code, errb.String())
	}

	cancel()
	if code := <-exited; code != 0 {
		t.Fatalf("serve exit code %d: %s", code, stderr)
	}
}

// metricsAddrFrom finds the metrics server's address in serve's JSON log.
func metricsAddrFrom(t *testing.T, log string) string {
	t.Helper()
	for line := range strings.Lines(log) {
		if strings.Contains(line, `"msg":"metrics and status"`) {
			var rec struct{ Addr string }
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatal(err)
			}
			return rec.Addr
		}
	}
	t.Fatalf("no metrics line in:\n%s", log)
	return ""
}

// frameCounter counts --watch frames (each starts with a clear-screen
// sequence) and calls done after want of them.
type frameCounter struct {
	mu   sync.Mutex
	n    int
	want int
	done func()
}

func (f *frameCounter) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n += bytes.Count(p, []byte("\033[2J"))
	if f.n >= f.want {
		f.done()
	}
	return len(p), nil
}

func (f *frameCounter) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}
