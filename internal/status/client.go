package status

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/kvp2p/kvp2p/internal/metrics"
)

// maxSnapshotBytes bounds what Fetch reads: a snapshot of a node at its
// peer cap with thousands of loads is a few MB.
const maxSnapshotBytes = 64 << 20

// URL turns a metrics address ("127.0.0.1:9464", ":9464" or a URL) into
// the status JSON's URL.
func URL(addr string) string {
	if strings.HasPrefix(addr, "http://") || strings.HasPrefix(addr, "https://") {
		return strings.TrimSuffix(addr, "/") + PathJSON
	}
	if strings.HasPrefix(addr, ":") {
		addr = "127.0.0.1" + addr
	}
	return "http://" + addr + PathJSON
}

// Fetch reads a node's snapshot from its metrics address.
func Fetch(ctx context.Context, c *http.Client, addr string) (*metrics.Snapshot, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, URL(addr), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body := io.LimitReader(resp.Body, maxSnapshotBytes)
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(body, 512))
		return nil, fmt.Errorf("status: %s: %s: %s", URL(addr), resp.Status, strings.TrimSpace(string(msg)))
	}
	s, err := Decode(body)
	if err != nil {
		return nil, fmt.Errorf("status: %s: %w", URL(addr), err)
	}
	return s, nil
}

// Decode reads one snapshot (as /status.json serves it) from r, at most
// maxSnapshotBytes of it.
func Decode(r io.Reader) (*metrics.Snapshot, error) {
	var s metrics.Snapshot
	if err := json.NewDecoder(io.LimitReader(r, maxSnapshotBytes)).Decode(&s); err != nil {
		return nil, fmt.Errorf("bad snapshot: %w", err)
	}
	if err := s.Hists.Valid(); err != nil {
		return nil, fmt.Errorf("bad snapshot: %w", err)
	}
	return &s, nil
}
