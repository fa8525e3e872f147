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

// TestDocsSimTables: every simulator table in docs/evaluation.md (a block
// between "<!-- sim: ARGS -->" and "<!-- /sim -->") is exactly what
// `kvp2p sim ARGS` prints now (scripts/sim-tables.sh regenerates them), and
// the main table and the ablation matrix are among them.
func TestDocsSimTables(t *testing.T) {
	if testing.Short() || raceEnabled {
		// It checks the document's content, not concurrency: every built-in
		// scenario under the race detector would cost minutes for nothing.
		t.Skip("runs every built-in scenario")
	}
	const doc = "../../docs/evaluation.md"
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	blocks := simBlocks(t, string(b))
	for _, must := range []string{"--scenario all --policy all", "--scenario all --ablation"} {
		if _, ok := blocks[must]; !ok {
			t.Errorf("%s has no block for kvp2p sim %s", doc, must)
		}
	}
	for args, block := range blocks {
		out, code := simOut(t, strings.Fields(args)...)
		if code != 0 {
			t.Fatalf("kvp2p sim %s: exit %d: %s", args, code, out)
		}
		if out != block {
			t.Errorf("%s's table is not what kvp2p sim %s prints: run scripts/sim-tables.sh\ndoc:\n%s\nnow:\n%s", doc, args, block, out)
		}
	}
}

// simBlocks are the doc's simulator tables by their arguments; a marker
// without its fenced block or its end is an error.
func simBlocks(t *testing.T, doc string) map[string]string {
	t.Helper()
	out := map[string]string{}
	const open, end = "<!-- sim: ", "```\n<!-- /sim -->"
	for rest := doc; ; {
		_, after, ok := strings.Cut(rest, open)
		if !ok {
			return out
		}
		args, body, ok := strings.Cut(after, " -->\n```\n")
		if !ok {
			t.Fatalf("sim marker %q without a fenced block after it", args)
		}
		block, tail, ok := strings.Cut(body, end)
		if !ok {
			t.Fatalf("sim block %q without its end marker", args)
		}
		if _, dup := out[args]; dup {
			t.Fatalf("two sim blocks for %q", args)
		}
		out[args] = block
		rest = tail
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
