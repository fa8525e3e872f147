package prom

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvp2p/kvp2p/internal/metrics"
)

func sample() *metrics.Snapshot {
	h := metrics.NewHistograms()
	h.TimeToFallback.Observe(0.4)
	h.TimeToFallback.Observe(0.6)
	return &metrics.Snapshot{
		Domains: []metrics.Domain{
			{Name: "pod-a", State: "suspect", Peers: []metrics.Peer{{ID: "a0", Sessions: []metrics.Session{{State: "ended", Cause: "conn-reset"}}},
				{ID: "a1", Live: true, Sessions: []metrics.Session{{State: "ready"}}}}},
			{Name: "pod-b", State: "ok", Peers: []metrics.Peer{{ID: "b0", Live: true, Sessions: []metrics.Session{{State: "ready"}, {State: "connecting"}}}}},
		},
		Loads:  []metrics.Load{{Job: 1}, {Job: 2}},
		Stores: 3,
		Counters: metrics.Counters{LookupHits: 7, LookupMisses: 2, BytesIn: 100, BytesOut: 50, ProbesSent: 4,
			SessionEnds: map[string]uint64{"conn-reset": 1}},
		Hists: h,
	}
}

func TestCollectorFromSnapshot(t *testing.T) {
	s := sample()
	reg := NewRegistry(func(context.Context) (*metrics.Snapshot, error) { return s, nil }, prometheus.Labels{"peer_id": "x"})
	want := `
# HELP kvp2p_active_sessions Sessions ready (handshake done, not ended).
# TYPE kvp2p_active_sessions gauge
kvp2p_active_sessions{peer_id="x"} 2
# HELP kvp2p_domains Known failure domains by state: ok, suspect (being probed after a fault), ejected (a member ejected, or the host quarantined under host-group).
# TYPE kvp2p_domains gauge
kvp2p_domains{peer_id="x",state="ejected"} 0
kvp2p_domains{peer_id="x",state="ok"} 1
kvp2p_domains{peer_id="x",state="suspect"} 1
# HELP kvp2p_inflight_transfers Jobs the node holds: loads in flight (kind=load) and stores waiting for or serving a fetch (kind=store).
# TYPE kvp2p_inflight_transfers gauge
kvp2p_inflight_transfers{kind="load",peer_id="x"} 2
kvp2p_inflight_transfers{kind="store",peer_id="x"} 3
# HELP kvp2p_lookup_hits_total Keys a peer answered a Lookup with as held.
# TYPE kvp2p_lookup_hits_total counter
kvp2p_lookup_hits_total{peer_id="x"} 7
# HELP kvp2p_transfer_bytes_total Block bytes moved on data paths: in (loads here) or out (served to peers).
# TYPE kvp2p_transfer_bytes_total counter
kvp2p_transfer_bytes_total{direction="in",peer_id="x"} 100
kvp2p_transfer_bytes_total{direction="out",peer_id="x"} 50
# HELP kvp2p_up 1 if the node's loop answered the scrape, 0 if it has stopped or did not answer in time.
# TYPE kvp2p_up gauge
kvp2p_up{peer_id="x"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kvp2p_active_sessions", "kvp2p_domains",
		"kvp2p_inflight_transfers", "kvp2p_lookup_hits_total", "kvp2p_transfer_bytes_total", "kvp2p_up"); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, mf := range mfs {
		found[mf.GetName()] = true
		if mf.GetName() == "kvp2p_time_to_fallback_seconds" {
			if len(mf.GetMetric()) != 2 {
				t.Fatalf("ttf: %d series, want via=load and via=lookup", len(mf.GetMetric()))
			}
			h := mf.GetMetric()[0].GetHistogram() // via=load sorts first
			if h.GetSampleCount() != 2 || h.GetSampleSum() != 1.0 {
				t.Errorf("ttf histogram: count %d sum %v", h.GetSampleCount(), h.GetSampleSum())
			}
		}
		if mf.GetName() == "kvp2p_session_ends_total" && len(mf.GetMetric()) != len(metrics.CauseNames()) {
			t.Errorf("session ends has %d series, want one per cause (%d)", len(mf.GetMetric()), len(metrics.CauseNames()))
		}
	}
	for _, d := range metrics.Defs() {
		if !found[d.Name] {
			t.Errorf("%s is defined but not exported", d.Name)
		}
	}
}

func TestCollectorNodeGone(t *testing.T) {
	reg := NewRegistry(func(context.Context) (*metrics.Snapshot, error) { return nil, errors.New("closed") }, nil)
	want := "# HELP kvp2p_up 1 if the node's loop answered the scrape, 0 if it has stopped or did not answer in time.\n# TYPE kvp2p_up gauge\nkvp2p_up 0\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kvp2p_up", "kvp2p_active_sessions"); err != nil {
		t.Fatal(err)
	}
}

// TestCollectorSlow: the slow state's metrics come from the snapshot's
// peers and counters (docs/liveness.md).
func TestCollectorSlow(t *testing.T) {
	s := sample()
	s.Domains[1].Peers[0].Slow = true
	s.Counters.LoadsTooSlow, s.Counters.LoadsOverBudget = 3, 2
	reg := NewRegistry(func(context.Context) (*metrics.Snapshot, error) { return s, nil }, nil)
	var want strings.Builder
	for _, d := range metrics.Defs() {
		switch d.Name {
		case "kvp2p_peers_slow", "kvp2p_loads_too_slow_total", "kvp2p_deliberate_fallbacks_total":
			v := map[string]int{"kvp2p_peers_slow": 1, "kvp2p_loads_too_slow_total": 3, "kvp2p_deliberate_fallbacks_total": 5}[d.Name]
			fmt.Fprintf(&want, "# HELP %s %s\n# TYPE %s %s\n%s %d\n", d.Name, d.Help, d.Name, d.Type, d.Name, v)
		}
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want.String()),
		"kvp2p_peers_slow", "kvp2p_loads_too_slow_total", "kvp2p_deliberate_fallbacks_total"); err != nil {
		t.Fatal(err)
	}
}
