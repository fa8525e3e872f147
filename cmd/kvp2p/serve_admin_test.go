package main

import (
	"context"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/nodetest"
)

// lineFeed hands every log line to the test in order, so that it can wait
// for each effect of a signal instead of sleeping.
type lineFeed chan string

func (f lineFeed) Write(p []byte) (int, error) {
	for line := range strings.Lines(string(p)) {
		select {
		case f <- line:
		default: // the test stopped reading; never block the logger
		}
	}
	return len(p), nil
}

// next returns the first line, from here on, that contains want.
func (f lineFeed) next(t *testing.T, want string, exited <-chan int) string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case line := <-f:
			if strings.Contains(line, want) {
				return line
			}
		case code := <-exited:
			t.Fatalf("serve exited %d while waiting for %q", code, want)
		case <-timeout:
			t.Fatalf("no log line with %q within 10 s", want)
		}
	}
}

// TestServeAdminSignals runs serve and sends this process SIGUSR2 twice
// and SIGUSR1 (serve has them registered once it logged "serving"): each
// is done and logged, and serve keeps running until cancelled.
func TestServeAdminSignals(t *testing.T) {
	cfg := nodetest.WriteConfig(t, "peer_id: 127.0.0.1:7600\nslots: 16\ntimers:\n  shutdown_drain: 100ms\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := make(lineFeed, 256)
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"serve", "--config", cfg, "--listen", "127.0.0.1:0",
			"--log-format", "json"}, io.Discard, logs)
	}()
	logs.next(t, `"msg":"serving"`, exited)
	for _, step := range []struct {
		sig  syscall.Signal
		want string
	}{
		{syscall.SIGUSR2, `"msg":"SIGUSR2: handshakes","refused":true`},
		{syscall.SIGUSR2, `"msg":"SIGUSR2: handshakes","refused":false`},
		{syscall.SIGUSR1, `"msg":"SIGUSR1: said goodbye (idle) to every session","sessions":0`},
	} {
		if err := syscall.Kill(os.Getpid(), step.sig); err != nil {
			t.Fatal(err)
		}
		logs.next(t, step.want, exited)
	}
	cancel()
	if code := <-exited; code != 0 {
		t.Fatalf("exit code %d after cancel, want 0", code)
	}
}
