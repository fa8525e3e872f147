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

	"github.com/kvp2p/kvp2p/internal/nodetest"
)

// TestServeExitCodes runs serve through run, as main does, for the ways it
// refuses to start: config and usage errors exit 2, runtime errors 1.
func TestServeExitCodes(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	bad := nodetest.WriteConfig(t, "peer_id: 127.0.0.1:7600\ntimers:\n  stall_timeout: abc\n")
	tests := []struct {
		name   string
		args   []string
		env    map[string]string
		code   int
		stderr string // a line of stderr starts with this
	}{
		{"bad duration in file", []string{"--config", bad}, nil, 2,
			`kvp2p serve: config: timers.stall_timeout: "abc": invalid duration`},
		{"bad duration in env", []string{"--peer-id", "127.0.0.1:7600"}, map[string]string{"KVP2P_TIMERS_STALL_TIMEOUT": "abc"}, 2,
			`kvp2p serve: config: timers.stall_timeout: "abc": invalid duration`},
		{"no config at all", nil, nil, 2, "kvp2p serve: config: peer_id is required"},
		{"missing file", []string{"--config", "/nonexistent/kvp2p.yaml"}, nil, 2, "kvp2p serve: config: open /nonexistent/kvp2p.yaml"},
		{"bad --set", []string{"--set", "stall_timeout"}, nil, 2, `invalid value "stall_timeout" for flag -set: want field=value`},
		{"unknown flag", []string{"--stall-timeout", "1s"}, nil, 2, "flag provided but not defined: -stall-timeout"},
		{"stray argument", []string{"--peer-id", "127.0.0.1:7600", "now"}, nil, 2, `kvp2p serve: unexpected argument "now"`},
		{"bad log format", []string{"--peer-id", "127.0.0.1:7600", "--log-format", "xml"}, nil, 2,
			`kvp2p serve: config: log-format: "xml": want text or json`},
		{"bad log level", []string{"--peer-id", "127.0.0.1:7600"}, map[string]string{"KVP2P_LOG_LEVEL": "loud"}, 2,
			`kvp2p serve: config: log-level: "loud"`},
		{"arena over the machine's memory", []string{"--peer-id", "127.0.0.1:7600", "--set", "slots=32768", "--set", "block_bytes=16777216"}, nil, 3,
			"kvp2p serve: config: slots 32768 x block_bytes 16777216 = 524288 MiB arena, over this machine's"},
		{"huge slots, default block", []string{"--peer-id", "127.0.0.1:7600", "--set", "slots=9000000000000000000"}, nil, 2,
			"kvp2p serve: config: slots 9000000000000000000: at most"},
		{"handshake timeout 1ns", []string{"--peer-id", "127.0.0.1:7600", "--set", "timers.handshake_timeout=1ns"}, nil, 2,
			"kvp2p serve: config: timers.handshake_timeout 1ns: must be 0 (preset) or at least 10ms"},
		{"heartbeat timeout under its interval", []string{"--peer-id", "127.0.0.1:7600", "--set", "timers.heartbeat_timeout=400ms"}, nil, 2,
			"kvp2p serve: config: timers: heartbeat_timeout must be longer than heartbeat_interval"},
		{"help", []string{"-h"}, nil, 0, "usage: kvp2p serve"},
		{"address in use", []string{"--peer-id", busy.Addr().String()}, nil, 1, "kvp2p serve: listen tcp " + busy.Addr().String()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var stderr bytes.Buffer
			code := run(context.Background(), append([]string{"serve"}, tt.args...), io.Discard, &stderr)
			if code != tt.code {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, tt.code, &stderr)
			}
			if !hasLinePrefix(stderr.String(), tt.stderr) {
				t.Errorf("stderr has no line starting %q:\n%s", tt.stderr, &stderr)
			}
		})
	}
}

func hasLinePrefix(text, prefix string) bool {
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, prefix) {
			return true
		}
	}
	return false
}

// TestServeEndToEnd starts a real node, waits for its "serving" log line
// (no sleeps), dials it, then cancels ctx as SIGTERM would and expects a
// graceful stop and exit code 0. goleak (TestMain) checks nothing is left.
func TestServeEndToEnd(t *testing.T) {
	t.Setenv("KVP2P_FAILURE_DOMAIN", "pod-1234")
	cfg := nodetest.WriteConfig(t, "peer_id: 127.0.0.1:7600\nslots: 16\ntimers:\n  shutdown_drain: 100ms\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := &logWatch{want: `"msg":"serving"`, seen: make(chan string, 1)}
	exited := make(chan int, 1)
	go func() {
		// peer_id stays a fixed example: peers dial it, nothing here does.
		// --listen 127.0.0.1:0 takes a free port, which the log line reports.
		exited <- run(ctx, []string{"serve", "--config", cfg, "--listen", "127.0.0.1:0",
			"--log-format", "json", "--policy", "host-group"}, io.Discard, stderr)
	}()

	var line string
	select {
	case line = <-stderr.seen:
	case code := <-exited:
		t.Fatalf("serve exited %d before serving:\n%s", code, stderr)
	}
	var rec struct {
		Addr          string `json:"addr"`
		PeerID        string `json:"peer_id"`
		FailureDomain string `json:"failure_domain"`
		Policy        string `json:"policy"`
	}
	if err := json.Unmarshal([]byte(line), &rec); err != nil {
		t.Fatalf("serving line %q: %v", line, err)
	}
	if rec.PeerID != "127.0.0.1:7600" || rec.FailureDomain != "pod-1234" || rec.Policy != "host-group" {
		t.Errorf("serving with %+v, want the file's peer_id, the env's domain and the flag's policy", rec)
	}
	nc, err := net.Dial("tcp", rec.Addr)
	if err != nil {
		t.Fatalf("dial the node: %v", err)
	}
	nc.Close()

	cancel()
	if code := <-exited; code != 0 {
		t.Fatalf("exit code %d after cancel, want 0; stderr:\n%s", code, stderr)
	}
	if !strings.Contains(stderr.String(), `"msg":"stopped"`) {
		t.Errorf("no \"stopped\" log line:\n%s", stderr)
	}
}

// logWatch collects log output and hands over the first line containing
// want, so that a test can wait for an event instead of sleeping.
type logWatch struct {
	want string
	seen chan string // buffered 1

	mu   sync.Mutex
	buf  bytes.Buffer
	sent bool
}

func (w *logWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.sent {
		for line := range strings.Lines(string(p)) {
			if strings.Contains(line, w.want) {
				w.seen <- line
				w.sent = true
				break
			}
		}
	}
	return len(p), nil
}

func (w *logWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
