package metrics

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

var update = flag.Bool("update", false, "rewrite docs/metrics.md's table from Defs")

func TestHistBuckets(t *testing.T) {
	h := NewHist(LatencyBuckets())
	for _, v := range []float64{0.0005, 0.001, 0.0011, 0.3, 45, 61, math.NaN()} {
		h.Observe(v)
	}
	if h.Count != 6 {
		t.Fatalf("count %d, want 6 (NaN dropped)", h.Count)
	}
	cum := h.Cumulative()
	for bound, want := range map[float64]uint64{0.001: 2, 0.0025: 3, 0.25: 3, 0.3: 4, 0.5: 4, 30: 4, 45: 5, 60: 5} {
		if cum[bound] != want {
			t.Errorf("<= %v: %d, want %d", bound, cum[bound], want)
		}
	}
	if h.Counts[len(h.Counts)-1] != 1 {
		t.Errorf("+Inf bucket %d, want 1", h.Counts[len(h.Counts)-1])
	}
	c := h.Clone()
	c.Observe(1)
	if h.Count != 6 || h.Counts[12] != 0 {
		t.Fatal("Clone shares its counts")
	}
}

func TestHistQuantile(t *testing.T) {
	h := NewHist([]float64{1, 2, 4})
	if h.Quantile(0.5) != 0 {
		t.Fatal("empty histogram's quantile is not 0")
	}
	for range 10 {
		h.Observe(1.5) // all in (1, 2]
	}
	if q := h.Quantile(0.5); q != 1.5 {
		t.Errorf("p50 = %v, want 1.5 (the bucket's middle)", q)
	}
	if q := h.Quantile(1); q != 2 {
		t.Errorf("p100 = %v, want 2", q)
	}
	h.Observe(100)
	if q := h.Quantile(1); q != 4 {
		t.Errorf("p100 beyond the last bound = %v, want that bound", q)
	}
}

func TestLatencyBucketsResolve1msTo60s(t *testing.T) {
	b := LatencyBuckets()
	if b[0] != 0.001 || b[len(b)-1] != 60 {
		t.Fatalf("buckets %v", b)
	}
	for i := 1; i < len(b); i++ {
		if b[i] <= b[i-1] || b[i]/b[i-1] > 3.01 {
			t.Errorf("bucket %v after %v: not ascending within a factor of 3", b[i], b[i-1])
		}
	}
}

func sample() *Snapshot {
	h := NewHistograms()
	h.TimeToFallback.Observe(0.4)
	h.TimeToFallback.Observe(0.6)
	return &Snapshot{
		Domains: []Domain{
			{Name: "pod-a", State: "suspect", Peers: []Peer{{ID: "a0", Sessions: []Session{{State: "ended", Cause: "conn-reset"}}},
				{ID: "a1", Live: true, Sessions: []Session{{State: "ready"}}}}},
			{Name: "pod-b", State: "ok", Peers: []Peer{{ID: "b0", Live: true, Sessions: []Session{{State: "ready"}, {State: "connecting"}}}}},
		},
		Loads:  []Load{{Job: 1}, {Job: 2}},
		Stores: 3,
		Counters: Counters{LookupHits: 7, LookupMisses: 2, BytesIn: 100, BytesOut: 50, ProbesSent: 4,
			SessionEnds: map[string]uint64{"conn-reset": 1}},
		Hists: h,
	}
}

func TestCollectorFromSnapshot(t *testing.T) {
	s := sample()
	reg := NewRegistry(func(context.Context) (*Snapshot, error) { return s, nil }, prometheus.Labels{"peer_id": "x"})
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
		if mf.GetName() == "kvp2p_session_ends_total" && len(mf.GetMetric()) != len(CauseNames()) {
			t.Errorf("session ends has %d series, want one per cause (%d)", len(mf.GetMetric()), len(CauseNames()))
		}
	}
	for _, d := range Defs() {
		if !found[d.Name] {
			t.Errorf("%s is defined but not exported", d.Name)
		}
	}
}

func TestCollectorNodeGone(t *testing.T) {
	reg := NewRegistry(func(context.Context) (*Snapshot, error) { return nil, errors.New("closed") }, nil)
	want := "# HELP kvp2p_up 1 if the node's loop answered the scrape, 0 if it has stopped or did not answer in time.\n# TYPE kvp2p_up gauge\nkvp2p_up 0\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kvp2p_up", "kvp2p_active_sessions"); err != nil {
		t.Fatal(err)
	}
}

// TestDefsWellFormed: names follow Prometheus conventions, and labels are
// the bounded ones.
func TestDefsWellFormed(t *testing.T) {
	bounded := map[string]bool{"cause": true, "state": true, "kind": true, "direction": true, "via": true}
	seen := map[string]bool{}
	for _, d := range Defs() {
		if seen[d.Name] {
			t.Errorf("%s defined twice", d.Name)
		}
		seen[d.Name] = true
		if !strings.HasPrefix(d.Name, "kvp2p_") || d.Help == "" {
			t.Errorf("%s: want a kvp2p_ name and help", d.Name)
		}
		if (d.Type == "counter") != strings.HasSuffix(d.Name, "_total") {
			t.Errorf("%s: counters, and only counters, end in _total", d.Name)
		}
		for _, l := range d.Labels {
			if !bounded[l] {
				t.Errorf("%s: label %q is not one of the bounded ones", d.Name, l)
			}
		}
	}
	// Everything vLLM's P2P tier exports has its kvp2p counterpart.
	vllm := "post_time_seconds transfer_time_seconds transfer_bytes num_descriptors lookup_rtt_seconds fetch_rtt_seconds " +
		"lookup_hits lookup_misses load_failures store_failures load_timeouts unbound_store_timeouts " +
		"active_sessions peer_disconnects inflight_transfers"
	mapped := map[string]bool{}
	for _, d := range Defs() {
		mapped[d.VLLM] = true
	}
	for _, v := range strings.Fields(vllm) {
		if !mapped[v] {
			t.Errorf("vllm:kv_offload_p2p_%s has no kvp2p metric", v)
		}
	}
}

// TestDocsTable: docs/metrics.md carries exactly Markdown() between its
// markers; `go test ./internal/metrics -update` rewrites it.
func TestDocsTable(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "metrics.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- metrics table: generated by `go test ./internal/metrics -update` -->\n", "<!-- end of metrics table -->"
	doc := string(b)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("%s: markers missing", path)
	}
	want := doc[:i+len(begin)] + Markdown() + doc[j:]
	if want == doc {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("%s is out of date with Defs: run go test ./internal/metrics -update", path)
}

// TestCollectorSlow: the slow state's metrics come from the snapshot's
// peers and counters (docs/liveness.md).
func TestCollectorSlow(t *testing.T) {
	s := sample()
	s.Domains[1].Peers[0].Slow = true
	s.Counters.LoadsTooSlow, s.Counters.LoadsOverBudget = 3, 2
	reg := NewRegistry(func(context.Context) (*Snapshot, error) { return s, nil }, nil)
	var want strings.Builder
	for _, d := range Defs() {
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
