package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvp2p/kvp2p/internal/health"
)

func simOut(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"sim"}, args...), &out, &errb)
	if code != 0 {
		return errb.String(), code
	}
	return out.String(), code
}

// TestSimDeterministic: the same command twice prints the same numbers.
func TestSimDeterministic(t *testing.T) {
	a, code := simOut(t, "--scenario", "rank-crash", "--seed", "3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, a)
	}
	b, _ := simOut(t, "--scenario", "rank-crash", "--seed", "3")
	if a != b {
		t.Fatalf("two runs differ:\n%s\n%s", a, b)
	}
	for _, p := range health.Names() {
		if !strings.Contains(a, p) {
			t.Fatalf("policy %s missing from the table:\n%s", p, a)
		}
	}
}

// TestSimJSONAndSVG: one JSON object per (scenario, policy) with the
// report's fields, and the SVG is written.
func TestSimJSONAndSVG(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "run.svg")
	out, code := simOut(t, "--scenario", "colocated", "--policy", "per-peer", "--json", "--svg", svg)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 1 {
		t.Fatalf("want one JSON line, got:\n%s", out)
	}
	var rep map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rep); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"scenario", "policy", "requests", "hits", "fallbacks", "affected", "false_fallbacks", "stuck", "ttf_ms", "corrupt_loads", "leaked_slots", "bytes_loaded",
		"censored", "tth_ms", "tth_domain_ms", "peak_slots", "orphan_slots", "timers"} {
		if _, ok := rep[k]; !ok {
			t.Fatalf("JSON report without %q: %s", k, lines[0])
		}
	}
	if b, err := os.ReadFile(svg); err != nil || !bytes.Contains(b, []byte("<svg")) {
		t.Fatalf("no SVG written: %v", err)
	}
}

// TestREADMESimTable: the README's simulator table is exactly what the
// command shown next to it prints (scripts/sim-tables.sh regenerates it).
func TestREADMESimTable(t *testing.T) {
	if testing.Short() || raceEnabled {
		// It checks the README's content, not concurrency: every built-in
		// scenario under the race detector would cost minutes for nothing.
		t.Skip("runs every built-in scenario")
	}
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	const args = "--scenario all --policy all"
	_, block, ok := strings.Cut(string(b), "<!-- sim: "+args+" -->\n```\n")
	if ok {
		block, _, ok = strings.Cut(block, "```\n<!-- /sim -->")
	}
	if !ok {
		t.Fatalf("README.md has no block for kvp2p sim %s", args)
	}
	out, code := simOut(t, strings.Fields(args)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	if out != block {
		t.Fatalf("README.md's table is not what kvp2p sim %s prints: run scripts/sim-tables.sh\nREADME:\n%s\nnow:\n%s", args, block, out)
	}
}

// TestSimAblation: --ablation prints each policy under both timer sets,
// domain also without domains; bad combinations are refused.
func TestSimAblation(t *testing.T) {
	out, code := simOut(t, "--scenario", "rank-crash", "--ablation")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 1+8 {
		t.Fatalf("want a header and 8 rows:\n%s", out)
	}
	for _, want := range []string{"domain      vllm    dropped", "per-peer    kvp2p   kept", "host-group  vllm    kept"} {
		if !strings.Contains(out, want) {
			t.Errorf("no row %q:\n%s", want, out)
		}
	}
	for _, args := range [][]string{{"--ablation", "--timers", "vllm"}, {"--ablation", "--drop-domains"}, {"--timers", "fast"}} {
		if _, code := simOut(t, append([]string{"--scenario", "rank-crash"}, args...)...); code == 0 {
			t.Errorf("%v: exit 0", args)
		}
	}
}

func TestSimBadArgs(t *testing.T) {
	for _, args := range [][]string{
		{"--policy", "nope"},
		{"--scenario", "no-such-scenario"},
		{"--svg", "x.svg"}, // all scenarios: one picture cannot hold them
	} {
		if _, code := simOut(t, args...); code == 0 {
			t.Fatalf("%v: exit 0", args)
		}
	}
}
