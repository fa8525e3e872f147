package lab

import (
	"context"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/kvp2p/kvp2p/internal/metrics"
	"github.com/kvp2p/kvp2p/internal/metrics/prom"
	"github.com/kvp2p/kvp2p/internal/status"
)

// The soak reads a serve's goroutines and sessions from the same handler
// and registry `kvp2p serve` mounts on metrics_addr: if either metric is
// renamed or dropped, this fails rather than the soak silently judging
// nothing.
func TestParseGoroutinesFromTheNodesRegistry(t *testing.T) {
	snap := &metrics.Snapshot{Domains: []metrics.Domain{{Name: "pod-a", State: "ok", Peers: []metrics.Peer{
		{ID: "a", Sessions: []metrics.Session{{State: "ready"}, {State: "ended"}}},
		{ID: "b", Sessions: []metrics.Session{{State: "connecting"}}},
	}}}}
	src := func(context.Context) (*metrics.Snapshot, error) { return snap, nil }
	h := status.NewHandler(src, prom.NewRegistry(src, nil))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", status.PathMetrics, nil))
	if rec.Code != 200 {
		t.Fatalf("/metrics: %d", rec.Code)
	}
	g, err := parseGoroutines(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	if g.sessions != 3 {
		t.Errorf("sessions %d, want 3 (every state)", g.sessions)
	}
	// The Go collector counts this test's goroutines: at least this one.
	if g.goroutines < 1 || g.goroutines > runtime.NumGoroutine()+50 {
		t.Errorf("goroutines %d, this process has %d", g.goroutines, runtime.NumGoroutine())
	}
}

func TestParseGoroutinesRefusesWhatItCannotJudge(t *testing.T) {
	for name, text := range map[string]string{
		"no go_goroutines":  "kvp2p_sessions{state=\"ready\"} 2\n",
		"no sessions":       "go_goroutines 12\n",
		"not a number":      "go_goroutines x\nkvp2p_sessions{state=\"ready\"} 2\n",
		"negative":          "go_goroutines -1\nkvp2p_sessions{state=\"ready\"} 2\n",
		"fraction":          "go_goroutines 1.5\nkvp2p_sessions{state=\"ready\"} 2\n",
		"huge":              "go_goroutines 1e300\nkvp2p_sessions{state=\"ready\"} 2\n",
		"empty":             "",
		"line over 64 KiB ": "go_goroutines 1\n" + strings.Repeat("x", 70<<10) + "\n",
	} {
		if g, err := parseGoroutines(strings.NewReader(text)); err == nil {
			t.Errorf("%s: %+v, want an error", name, g)
		}
	}
	g, err := parseGoroutines(strings.NewReader("# HELP go_goroutines n\ngo_goroutines 30 1700000000\n" +
		"kvp2p_sessions{peer_id=\"x\",state=\"ready\"} 2\nkvp2p_sessions{state=\"ended\"} 1\ngo_goroutines_other 9\n"))
	if err != nil || g != (gorSample{goroutines: 30, sessions: 3}) {
		t.Errorf("%+v, %v; want 30 goroutines, 3 sessions", g, err)
	}
}

// The leak rule: goroutines that come with sessions are not growth;
// goroutines beyond them are, past the slack.
func TestGoroutineLeakRule(t *testing.T) {
	start := gorSample{goroutines: 58, sessions: 10} // a consumer of the soak's fleet: 18 of its own
	for _, tc := range []struct {
		end  gorSample
		leak bool
	}{
		{gorSample{58, 10}, false},
		{gorSample{26, 2}, false},                        // sessions gone: fewer goroutines
		{gorSample{66, 12}, false},                       // two more sessions (PD stores' reverse sessions)
		{gorSample{58 + leakSlack, 10}, false},           // within the slack
		{gorSample{58 + leakSlack + 1, 10}, true},        // one past it
		{gorSample{58 + 4*10 + leakSlack + 1, 10}, true}, // ten sessions' worth without the sessions
		{gorSample{34, 0}, true},                         // 34 without a session: what a stuck writer looks like until it ends
	} {
		if got := gorLeaked(start, tc.end); got != tc.leak {
			t.Errorf("start %+v, end %+v: leaked %v, want %v", start, tc.end, got, tc.leak)
		}
	}
	over := gorOver(map[string]gorSample{"a": start, "b": start, "c": start},
		map[string]gorSample{"a": start, "b": {goroutines: 100, sessions: 10}})
	if len(over) != 2 || !over["b"] || !over["c"] {
		t.Errorf("over %v, want b (grew) and c (not counted)", over)
	}
}

func FuzzParseGoroutines(f *testing.F) {
	f.Add("go_goroutines 30\nkvp2p_sessions{state=\"ready\"} 2\n")
	f.Add("go_goroutines 1e9\nkvp2p_sessions 1 2\n")
	f.Add("# x\n\n{ }\n")
	f.Fuzz(func(t *testing.T, text string) {
		g, err := parseGoroutines(strings.NewReader(text))
		if err == nil && (g.goroutines < 0 || g.sessions < 0) {
			t.Errorf("%+v from %q", g, text)
		}
	})
}
