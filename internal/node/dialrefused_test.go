package node

import (
	"context"
	"net"
	"testing"
	"time"
)

// TestDialRefused: a connect to a loopback port nobody listens on is told
// apart as refused (the domain policy then stops waiting on dials to that
// peer); a dial that runs out of time is not.
func TestDialRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var d net.Dialer
	_, err = d.DialContext(context.Background(), "tcp", addr)
	if err == nil || !dialRefused(err) {
		t.Fatalf("dial to a closed port: %v, want refused", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	if _, err := d.DialContext(ctx, "tcp", addr); err == nil || dialRefused(err) {
		t.Fatalf("dial past its deadline: %v, want a failure that is not refused", err)
	}
}
