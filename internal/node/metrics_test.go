package node

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/metrics"
	"github.com/kvp2p/kvp2p/internal/metrics/prom"
	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/status"
)

// Metrics and status of real nodes on loopback, under scripted faults.

// serveStatus serves n's status handler on a loopback port until cleanup.
func serveStatus(t *testing.T, n *Node) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := status.Start(ln, status.NewHandler(n.Status, prom.NewRegistry(n.Status, nil)))
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("status server: %v", err)
		}
	})
	return ln.Addr().String()
}

// scrape reads addr's /metrics into "name{labels}" -> value (the text
// format's sample lines; labels as exposed, in order).
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	body := get(t, "http://"+addr+"/metrics", http.StatusOK)
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad sample line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

func get(t *testing.T, url string, want int) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != want {
		t.Fatalf("GET %s: %s, want %d: %s", url, resp.Status, want, b)
	}
	return string(b)
}

func snapshotOf(t *testing.T, addr string) *metrics.Snapshot {
	t.Helper()
	var s metrics.Snapshot
	if err := json.Unmarshal([]byte(get(t, "http://"+addr+status.PathJSON, http.StatusOK)), &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

// waitMetric waits until name's sample satisfies ok, and returns the scrape.
func waitMetric(t *testing.T, addr, name string, ok func(float64) bool) map[string]float64 {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		m := scrape(t, addr)
		if v, found := m[name]; found && ok(v) {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v (present: %v): condition not reached", name, m[name], hasKey(m, name))
		}
		<-time.After(10 * time.Millisecond)
	}
}

func hasKey(m map[string]float64, k string) bool { _, ok := m[k]; return ok }

func eq(want float64) func(float64) bool { return func(v float64) bool { return v == want } }

// wantSamples checks exact values.
func wantSamples(t *testing.T, m map[string]float64, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		got, ok := m[k]
		if !ok {
			t.Errorf("%s: missing", k)
		} else if got != v {
			t.Errorf("%s = %v, want %v", k, got, v)
		}
	}
}

// TestMetricsLoadThenPeerCrash: a PD load moves the hit metrics; the
// producer then crashes under a load in flight, and the consumer's
// metrics show the session's end by cause, the disconnect, the failed
// load and its time to fallback.
func TestMetricsLoadThenPeerCrash(t *testing.T) {
	p := startTN(t, nodeOpt{})
	c := startTN(t, nodeOpt{})
	addr := serveStatus(t, c.Node)

	m := scrape(t, addr)
	wantSamples(t, m, map[string]float64{
		"kvp2p_up": 1, "kvp2p_active_sessions": 0, `kvp2p_session_ends_total{cause="conn-reset"}`: 0,
		"kvp2p_load_failures_total": 0, `kvp2p_time_to_fallback_seconds_count{via="load"}`: 0,
	})
	if get(t, "http://"+addr+status.PathReadyz, http.StatusOK) != "ready\n" {
		t.Fatal("a serving node without an engine is not ready")
	}

	warm(t, c, p)
	ks := nodetest.Keys("m", 3)
	storeBlocks(t, p, "kv1", ks)
	c.m.NewRequest("d1", nodetest.PDParams(t, "kv1", p.PeerID()))
	if v := waitVerdict(t, c.m, "d1", ks[0]); v != Hit {
		t.Fatalf("lookup = %v", v)
	}
	lj, _ := c.m.SubmitLoad("d1", ks)
	if r := waitResult(t, c.m, lj, 5*time.Second); !r.OK {
		t.Fatalf("load: %+v", r)
	}
	c.m.RequestFinished("d1")
	m = scrape(t, addr)
	wantSamples(t, m, map[string]float64{
		"kvp2p_active_sessions":                      1,
		"kvp2p_time_to_hit_seconds_count":            1,
		"kvp2p_transfer_time_seconds_count":          1,
		"kvp2p_fetch_rtt_seconds_count":              1,
		"kvp2p_transfer_blocks_sum":                  3,
		`kvp2p_transfer_bytes_total{direction="in"}`: 3 * nodetest.BlockBytes,
		"kvp2p_load_failures_total":                  0,
	})

	// A symmetric request asks the producer: 3 keys held, 2 not.
	c.m.NewRequest("s1", nodetest.SymParams(t, "kv-s1", p.PeerID()))
	for _, k := range ks {
		if err := p.m.PutBlock(k, nodetest.Bytes(k)); err != nil {
			t.Fatal(err)
		}
	}
	lookupAll(t, c.m, "s1", append(append([]Key{}, ks...), nodetest.Keys("absent", 2)...))
	c.m.RequestFinished("s1")
	m = scrape(t, addr)
	wantSamples(t, m, map[string]float64{"kvp2p_lookup_hits_total": 3, "kvp2p_lookup_misses_total": 2})
	if m["kvp2p_lookup_rtt_seconds_count"] < 1 {
		t.Errorf("lookup round trips not timed")
	}

	// The fault: a load waits on the producer (nothing stored yet), which
	// then crashes.
	c.m.NewRequest("d2", nodetest.PDParams(t, "kv2", p.PeerID()))
	if v := waitVerdict(t, c.m, "d2", ks[0]); v != Hit {
		t.Fatalf("lookup = %v", v)
	}
	lj, _ = c.m.SubmitLoad("d2", nodetest.Keys("m2", 2))
	s := waitSnapshot(t, addr, func(s *metrics.Snapshot) bool { return len(s.Loads) == 1 })
	if l := s.Loads[0]; l.Job != lj || l.Peer != p.PeerID() || l.Blocks != 2 || l.ReqID != "d2" {
		t.Fatalf("load in flight = %+v, want job %d to %s, 2 blocks", l, lj, p.PeerID())
	}
	p.Close()
	if r := waitResult(t, c.m, lj, 5*time.Second); r.OK {
		t.Fatal("load to a crashed peer succeeded")
	}
	m = waitMetric(t, addr, `kvp2p_session_ends_total{cause="conn-reset"}`, eq(1))
	wantSamples(t, m, map[string]float64{
		"kvp2p_peer_disconnects_total":                     1,
		"kvp2p_load_failures_total":                        1,
		`kvp2p_time_to_fallback_seconds_count{via="load"}`: 1,
		"kvp2p_active_sessions":                            0,
		`kvp2p_inflight_transfers{kind="load"}`:            0,
		"kvp2p_load_timeouts_total":                        0,
		"kvp2p_stalls_detected_total":                      0,
	})
	if ttf := m[`kvp2p_time_to_fallback_seconds_sum{via="load"}`]; ttf <= 0 || ttf > 5 {
		t.Errorf("time to fallback %v s, want in (0, 5]", ttf)
	}
}

func waitSnapshot(t *testing.T, addr string, ok func(*metrics.Snapshot) bool) *metrics.Snapshot {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s := snapshotOf(t, addr)
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			b, _ := json.MarshalIndent(s, "", " ")
			t.Fatalf("snapshot never matched; last:\n%s", b)
		}
		<-time.After(10 * time.Millisecond)
	}
}

// partialPod runs vLLM #56828 against a consumer under the domain policy:
// a pod of two ranks (one failure domain) where rank 0 crashes and rank
// 1's data path goes silent while its control connection stays up. It
// returns the consumer, its status address and the two ranks.
func partialPod(t *testing.T) (c *tnode, addr string, r0, r1 *tnode) {
	pod := func(cfg *Config) { cfg.FailureDomain = "pod-a" }
	r0 = startTN(t, nodeOpt{mut: pod})
	r1 = startTN(t, nodeOpt{wrap: true, mut: pod})
	c = startTN(t, nodeOpt{mut: func(cfg *Config) { cfg.FailureDomain = "consumer" }})
	addr = serveStatus(t, c.Node)
	warm(t, c, r0)
	warm(t, c, r1)
	waitSnapshot(t, addr, func(s *metrics.Snapshot) bool { return s.SessionCount("ready") == 2 })
	r1.fl.blackhole(true)
	r0.Close()
	return c, addr, r0, r1
}

// TestMetricsPartialPodFailure: the pod's domain turns suspect, its live
// rank is probed, the probe goes unanswered and that session is closed by
// the policy; the status shows the domain suspect with both sessions gone.
func TestMetricsPartialPodFailure(t *testing.T) {
	c, addr, r0, r1 := partialPod(t)
	m := waitMetric(t, addr, "kvp2p_probes_failed_total", eq(1))
	wantSamples(t, m, map[string]float64{
		`kvp2p_session_ends_total{cause="conn-reset"}`:     1,
		`kvp2p_session_ends_total{cause="progress-stall"}`: 1,
		"kvp2p_peer_disconnects_total":                     2,
		"kvp2p_stalls_detected_total":                      0, // the policy closed it, not the watchdog
		`kvp2p_domains{state="suspect"}`:                   1,
		`kvp2p_domains{state="ejected"}`:                   0,
	})
	if m["kvp2p_probes_sent_total"] < 1 {
		t.Errorf("probes sent = %v", m["kvp2p_probes_sent_total"])
	}
	s := snapshotOf(t, addr)
	var pod *metrics.Domain
	for i := range s.Domains {
		if s.Domains[i].Name == "pod-a" {
			pod = &s.Domains[i]
		}
	}
	if pod == nil || pod.State != "suspect" || len(pod.Peers) != 2 {
		t.Fatalf("pod-a = %+v, want suspect with two peers", pod)
	}
	for _, p := range pod.Peers {
		if p.ID != r0.PeerID() && p.ID != r1.PeerID() {
			t.Errorf("unexpected peer %s in pod-a", p.ID)
		}
		if p.Live {
			t.Errorf("peer %s still live", p.ID)
		}
	}
	if s.Counters.SessionEnds["progress-stall"] != 1 {
		t.Errorf("snapshot session ends = %v", s.Counters.SessionEnds)
	}

	// A request to the silent rank now: its domain is suspect, so the
	// lookup waits for the rank to prove its data path, then falls back.
	c.m.NewRequest("late", nodetest.PDParams(t, "kv-late", r1.PeerID()))
	if v := waitVerdict(t, c.m, "late", nodetest.Key("late", 0)); v != Miss {
		t.Fatalf("lookup to the silent rank = %v, want MISS", v)
	}
	m = scrape(t, addr)
	wantSamples(t, m, map[string]float64{
		"kvp2p_lookup_fallbacks_total":                       1,
		`kvp2p_time_to_fallback_seconds_count{via="lookup"}`: 1,
	})
	if w := m[`kvp2p_time_to_fallback_seconds_sum{via="lookup"}`]; w <= 0 || w > 2 {
		t.Errorf("lookup waited %v s before its fallback, want (0, 2]", w)
	}
}

// TestStatusWhileServing: the snapshot answers while loads run, and a
// stopped node answers ErrClosed (the scrape then reports kvp2p_up 0).
func TestStatusAfterClose(t *testing.T) {
	n := startTN(t, nodeOpt{})
	addr := serveStatus(t, n.Node)
	if s, err := n.Status(context.Background()); err != nil || !s.Node.Listening || s.Node.PeerID != n.PeerID() {
		t.Fatalf("status = %+v, %v", s, err)
	}
	n.Close()
	<-n.done
	if _, err := n.Status(context.Background()); err != ErrClosed {
		t.Fatalf("status of a closed node: %v, want ErrClosed", err)
	}
	wantSamples(t, scrape(t, addr), map[string]float64{"kvp2p_up": 0})
	get(t, "http://"+addr+status.PathReadyz, http.StatusServiceUnavailable)
	if got := get(t, "http://"+addr+status.PathHealthz, http.StatusOK); got != "ok\n" {
		t.Fatalf("healthz = %q", got)
	}
}

// TestMetricsTimeouts: under per-peer (vLLM's timers, no watchdog) a load
// over a silent data path fails by its load timeout, and a PD store no
// decoder fetches fails by the unbound-store timeout; each shows in its
// node's metrics.
func TestMetricsTimeouts(t *testing.T) {
	mut := func(c *Config) {
		c.Policy = "per-peer"
		c.Timers.HeartbeatTimeout = 5 * time.Second
		c.Timers.LoadTimeoutPD = 800 * time.Millisecond
		c.Timers.UnboundStoreTimeout = 300 * time.Millisecond
	}
	p := startTN(t, nodeOpt{wrap: true, mut: mut})
	c := startTN(t, nodeOpt{mut: mut})
	paddr, caddr := serveStatus(t, p.Node), serveStatus(t, c.Node)
	warm(t, c, p)

	storeBlocks(t, p, "kv-orphan", nodetest.Keys("orphan", 2)) // no decoder ever fetches it
	waitMetric(t, paddr, "kvp2p_unbound_store_timeouts_total", eq(1))
	wantSamples(t, scrape(t, paddr), map[string]float64{"kvp2p_store_failures_total": 1})

	ks := nodetest.Keys("timeout", 2)
	storeBlocks(t, p, "kv1", ks)
	p.fl.blackhole(true)
	c.m.NewRequest("d1", nodetest.PDParams(t, "kv1", p.PeerID()))
	lj, _ := c.m.SubmitLoad("d1", ks)
	if r := waitResult(t, c.m, lj, 5*time.Second); r.OK {
		t.Fatalf("load over a silent data path succeeded: %+v", r)
	}
	m := waitMetric(t, caddr, "kvp2p_load_timeouts_total", eq(1))
	wantSamples(t, m, map[string]float64{
		"kvp2p_load_failures_total":                        1,
		`kvp2p_time_to_fallback_seconds_count{via="load"}`: 1,
		"kvp2p_stalls_detected_total":                      0,
		"kvp2p_probes_sent_total":                          0,
	})
	if w := m[`kvp2p_time_to_fallback_seconds_sum{via="load"}`]; w < 0.8 || w > 5 {
		t.Errorf("time to fallback %v s, want the load timeout (0.8 s) or a little more", w)
	}
}
