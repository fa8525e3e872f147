package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/report"
	"github.com/kvp2p/kvp2p/internal/scenario"
	"github.com/kvp2p/kvp2p/internal/sim"
)

// tinyScenario is internal/demo's test scenario: two source ranks, one
// consumer, 3 s of mixed requests, one source rank crashes at 1 s.
const tinyScenario = "../../internal/demo/testdata/tiny.yaml"

// TestDemoScenarioRealSockets runs a tiny scenario file on real sockets
// through the command line and checks the report's shape and invariants,
// and that it made the very requests the simulator makes.
func TestDemoScenarioRealSockets(t *testing.T) {
	path := tinyScenario
	svg := filepath.Join(t.TempDir(), "tiny.svg")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"demo", "--scenario", path, "--policy", health.Domain, "--json", "--svg", svg}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("want one JSON line, got %q", out.String())
	}
	var fields map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &fields); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"scenario", "policy", "requests", "hits", "fallbacks", "affected", "false_fallbacks",
		"stuck", "ttf_ms", "corrupt_loads", "leaked_slots", "bytes_loaded"} {
		if _, ok := fields[k]; !ok {
			t.Errorf("JSON report lacks %q: %s", k, lines[0])
		}
	}
	var rep report.Report
	if err := json.Unmarshal([]byte(lines[0]), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Scenario != "tiny" || rep.Policy != health.Domain {
		t.Errorf("report names %s/%s", rep.Scenario, rep.Policy)
	}
	if rep.Requests == 0 || rep.Hits == 0 {
		t.Errorf("no requests or no hits: %+v", rep)
	}
	if rep.Hits+rep.Fallbacks+rep.Stuck != rep.Requests {
		t.Errorf("outcomes do not add up: %+v", rep)
	}
	if rep.CorruptLoads != 0 || rep.LeakedSlots != 0 || rep.Stuck != 0 {
		t.Errorf("corrupt, leaked or stuck: %+v", rep)
	}
	if rep.BytesLoaded != uint64(rep.Hits)*4*16384 {
		t.Errorf("bytes_loaded %d for %d hits", rep.BytesLoaded, rep.Hits)
	}
	if rep.Affected > rep.Requests || rep.FalseFallbacks > rep.Fallbacks {
		t.Errorf("affected or false fallbacks out of range: %+v", rep)
	}
	if st, err := os.Stat(svg); err != nil || st.Size() == 0 {
		t.Errorf("svg not written: %v", err)
	}

	// The simulator draws the same arrivals, sources and modes.
	sc, err := scenario.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	res, err := sim.Run(sc, health.Domain, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests != res.Report.Requests {
		t.Errorf("demo made %d requests, the simulator %d", rep.Requests, res.Report.Requests)
	}
}

// TestDemoTableNarrowAndWide: by default the demo prints the narrow table
// and a legend of exactly its columns; --wide prints every column, their
// legend and the harness's figures.
func TestDemoTableNarrowAndWide(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the tiny scenario twice on real sockets")
	}
	for _, wide := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		args := []string{"demo", "--scenario", tinyScenario, "--policy", health.Domain}
		if wide {
			args = append(args, "--wide")
		}
		var out, errb bytes.Buffer
		code := run(ctx, args, &out, &errb)
		cancel()
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		s := out.String()
		_, table, ok := strings.Cut(s, "\nscenario ")
		if !ok {
			t.Fatalf("%v: no table:\n%s", args, s)
		}
		heading, _, _ := strings.Cut("scenario "+table, "\n")
		_, legend, ok := strings.Cut(s, "\ncolumns:\n")
		if !ok {
			t.Fatalf("%v: no legend:\n%s", args, s)
		}
		for _, col := range []string{"hits", "fallbacks", "false", "stuck", "corrupt", "leaked"} {
			if !strings.Contains(heading, col) || !strings.Contains(legend, "\n  "+col+" ") && !strings.HasPrefix(legend, "  "+col+" ") {
				t.Errorf("%v: column %q missing from the heading or the legend:\n%s", args, col, s)
			}
		}
		narrowOnly := !strings.Contains(heading, "tth-domain") && !strings.Contains(legend, "tth-domain") &&
			!strings.Contains(s, "goroutines waited") && !strings.Contains(heading, "requests")
		if wide == narrowOnly {
			t.Errorf("%v: wide=%v but the output is %s:\n%s", args, wide, map[bool]string{true: "narrow", false: "wide"}[narrowOnly], s)
		}
		if !wide && len(heading) > 100 {
			t.Errorf("narrow heading is %d characters wide: %q", len(heading), heading)
		}
	}
}
