package demo

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/node"
	"github.com/kvp2p/kvp2p/internal/status"
)

// TestDemoStatusPorts: --metrics-addr gives policy i port + i, and a run
// that has not started answers 503 rather than hanging.
func TestDemoStatusPorts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // free again for ServeStatus (a race with other listeners is harmless: the test then fails to listen)
	var out bytes.Buffer
	stop, err := ServeStatus(ln.Addr().String(), []string{"per-peer", "domain"}, func(string) *node.Node { return nil }, &out)
	if err != nil {
		t.Skipf("port %d taken meanwhile: %v", base, err)
	}
	defer stop()
	for i, pol := range []string{"per-peer", "domain"} {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(base+i))
		if !strings.Contains(out.String(), pol+"'s first consumer: http://"+addr+"/") {
			t.Errorf("no address line for %s on %s:\n%s", pol, addr, out.String())
		}
		if _, err := status.Fetch(context.Background(), &http.Client{Timeout: 5 * time.Second}, addr); err == nil ||
			!strings.Contains(err.Error(), "has not started") {
			t.Errorf("status of a run not started: %v", err)
		}
	}
	if _, err := ServeStatus("127.0.0.1:0", []string{"a", "b"}, nil, io.Discard); err == nil {
		t.Error("port 0 accepted for two policies")
	}
}
