package status

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kvp2p/kvp2p/internal/metrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func sample() *metrics.Snapshot {
	h := metrics.NewHistograms()
	h.TimeToFallback.Observe(0.3)
	return &metrics.Snapshot{
		Node: metrics.Node{PeerID: "10.0.0.1:7600", FailureDomain: "pod-a", Policy: "domain", Listening: true, UptimeSec: 75},
		Domains: []metrics.Domain{
			{Name: "pod-b", State: "ejected", Peers: []metrics.Peer{{ID: "10.0.0.2:7600", EjectedForSec: 8.5, Faults: 3}}},
			{Name: "pod-c", State: "suspect", Peers: []metrics.Peer{{ID: "10.0.0.3:7600", Live: true, Probing: true,
				Sessions: []metrics.Session{{Conn: 4, Outbound: true, State: "ready", AgeSec: 12, BytesIn: 3 << 20, LastProgressSec: 0.02}}}}},
			{Name: "pod-d", State: "ok", Peers: []metrics.Peer{{ID: "10.0.0.4:7600", Live: true, Slow: true,
				Sessions: []metrics.Session{{Conn: 5, Outbound: true, State: "ready", AgeSec: 3, BytesIn: 1 << 20, LastProgressSec: 0.05, Slow: true}}}}},
		},
		Loads:    []metrics.Load{{Job: 9, ReqID: "req-9", Peer: "10.0.0.3:7600", Domain: "pod-c", AgeSec: 0.12, Blocks: 4, Bytes: 1 << 18}},
		Counters: metrics.Counters{LoadFailures: 3, LoadsTooSlow: 2, SessionEnds: map[string]uint64{"conn-reset": 2}},
		Hists:    h,
	}
}

func serve(t *testing.T, src metrics.Source) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := Start(ln, NewHandler(src, nil))
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	return ln.Addr().String()
}

func fetch(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestEndpoints(t *testing.T) {
	s := sample()
	addr := serve(t, func(context.Context) (*metrics.Snapshot, error) { return s, nil })
	got, err := Fetch(context.Background(), http.DefaultClient, addr)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(s)
	b, _ := json.Marshal(got)
	if !bytes.Equal(a, b) {
		t.Fatalf("round trip:\n%s\n%s", a, b)
	}
	if code, body := fetch(t, "http://"+addr+PathReadyz); code != 200 || body != "ready\n" {
		t.Fatalf("readyz: %d %q", code, body)
	}
	if code, _ := fetch(t, "http://"+addr+"/nope"); code != 404 {
		t.Fatalf("unknown path: %d", code)
	}
	code, page := fetch(t, "http://"+addr+"/")
	if code != 200 {
		t.Fatalf("page: %d", code)
	}
	for _, want := range []string{`data-domain="pod-b" data-state="ejected"`, "ejected, 8.5s left", `data-domain="pod-c" data-state="suspect"`,
		"probing", `data-job="9"`, "req-9", "3.0 MiB", "Time to fallback (1 fallbacks", `http-equiv="refresh"`,
		`<span class="badge s-slow"`, "<b>1 / 2</b><span>peers slow"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(page, "http://") || strings.Contains(page, "https://") || strings.Contains(page, "<script src") {
		t.Error("the page refers to external assets")
	}

	// Not ready: an engine is expected and has not registered; then the
	// node is gone.
	s.Node.EngineExpected = true
	if code, body := fetch(t, "http://"+addr+PathReadyz); code != 503 || !strings.Contains(body, "engine") {
		t.Fatalf("readyz without the engine: %d %q", code, body)
	}
	s.Node.EngineAttached = true
	s.Node.Listening = false
	if code, body := fetch(t, "http://"+addr+PathReadyz); code != 503 || !strings.Contains(body, "not listening") {
		t.Fatalf("readyz while draining: %d %q", code, body)
	}
}

func TestNodeGone(t *testing.T) {
	addr := serve(t, func(context.Context) (*metrics.Snapshot, error) { return nil, errors.New("kvp2p: node closed") })
	if code, _ := fetch(t, "http://"+addr+PathHealthz); code != 200 {
		t.Fatalf("healthz: %d", code)
	}
	for _, p := range []string{PathReadyz, PathJSON, "/"} {
		if code, body := fetch(t, "http://"+addr+p); code != 503 || !strings.Contains(body, "node closed") {
			t.Errorf("%s: %d %q", p, code, body)
		}
	}
	if _, err := Fetch(context.Background(), http.DefaultClient, addr); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("Fetch from a gone node: %v", err)
	}
}

func TestWriteText(t *testing.T) {
	var b bytes.Buffer
	if err := WriteText(&b, sample()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"node 10.0.0.1:7600  domain pod-a  policy domain  up 1m15s  ready", "pod-b", "EJECTED",
		"ejected 8.5s left, 3 faults, no session", "SUSPECT", "probing", "#4 out", "3.0 MiB", "20ms",
		"LOADS IN FLIGHT (1)", "req-9", "session ends: conn-reset 2", "time to fallback: 1",
		"slow (too slow for a load's deadline)", "ready, slow", "peers slow 1  deliberate fallbacks 2 (too slow 2, over start budget 0)"} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
}

func TestFormat(t *testing.T) {
	for in, want := range map[float64]string{-1: "never", 0.0004: "400µs", 0.25: "250ms", 1.5: "1.5s", 125: "2m05s", 7300: "2h01m"} {
		if got := Dur(in); got != want {
			t.Errorf("Dur(%v) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 3 << 20: "3.0 MiB"} {
		if got := Bytes(in); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", in, got, want)
		}
	}
	if URL(":9464") != "http://127.0.0.1:9464/status.json" || URL("http://h:1/") != "http://h:1/status.json" {
		t.Error("URL")
	}
}

func TestServerClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := Start(ln, http.NotFoundHandler())
	done := make(chan error, 1)
	go func() { done <- srv.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung")
	}
}

// FuzzDecode: whatever a status address answers, Decode returns a
// snapshot or an error, never panics, and a snapshot it returns renders.
func FuzzDecode(f *testing.F) {
	b, _ := json.Marshal(sample())
	f.Add(b)
	f.Add([]byte(`{"domains":[{"peers":[{"sessions":[{}]}]}],"histograms":{"time_to_fallback":{"bounds":[1],"counts":[5,1,7]}}}`))
	f.Add([]byte(`{"histograms":{"time_to_fallback":{"bounds":[],"counts":[],"count":3}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Decode(bytes.NewReader(data))
		if err != nil {
			return
		}
		if err := WriteText(io.Discard, s); err != nil {
			t.Fatal(err)
		}
		if err := renderPage(newPage(), io.Discard, s); err != nil {
			t.Fatal(err)
		}
	})
}
