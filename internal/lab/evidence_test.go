package lab

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/report"
	"github.com/kvp2p/kvp2p/internal/scenario"
)

// A run's false fallbacks are those report.Compute counts (a fallback no
// fault touched and the consumer did not choose); keepEvidence keeps the
// run's logs and configs, not its sockets, and those requests' records.
func TestKeepEvidence(t *testing.T) {
	const s = time.Second
	target, err := scenario.ParseTarget("a/1")
	if err != nil {
		t.Fatal(err)
	}
	sc := &scenario.Scenario{
		Name: "t", Duration: 40 * s, Seed: 1,
		Pods: []scenario.Pod{{Name: "a", Host: "h1", Ranks: 2, BasePort: 7777}, {Name: "d", Host: "h2", Ranks: 1, BasePort: 7777}},
		Workload: scenario.Workload{Mode: scenario.ModePD, Rate: 1, Blocks: 1, BlockBytes: 1, Sources: []string{"a"},
			Consumers: []string{"d"}, Stop: 40 * s},
		Faults: []scenario.Fault{{At: 10 * s, Kind: scenario.Crash, Target: target}},
	}
	reqs := []report.Request{
		{ID: "hit", Consumer: "d/0", Source: "a/0", Arrived: 1 * s, Resolved: 2 * s, Outcome: report.Hit},
		{ID: "false", Consumer: "d/0", Source: "a/0", Arrived: 12 * s, Resolved: 13 * s, Outcome: report.Fallback},
		{ID: "chosen", Consumer: "d/0", Source: "a/0", Arrived: 14 * s, Resolved: 15 * s, Outcome: report.Fallback, Deliberate: true},
		{ID: "crashed", Consumer: "d/0", Source: "a/1", Arrived: 12 * s, Resolved: 13 * s, Outcome: report.Fallback},
	}
	got := report.FalseFallbacks(sc, reqs)
	if len(got) != 1 || got[0].ID != "false" {
		t.Fatalf("false fallbacks %+v, want only the request named false", got)
	}
	if rep := report.Compute(sc, "domain", reqs, 0); rep.FalseFallbacks != len(got) {
		t.Fatalf("report counts %d false, FalseFallbacks finds %d", rep.FalseFallbacks, len(got))
	}

	run, root := t.TempDir(), t.TempDir()
	for name, text := range map[string]string{"a-0.log": "a log\n", "a-0.yaml": "node: {}\n"} {
		if err := os.WriteFile(filepath.Join(run, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(run, "a-0.sock"), 0o700); err != nil { // not a regular file, as a socket
		t.Fatal(err)
	}
	dst, err := keepEvidence(root, run, sc, "domain", got, time.Date(2026, 12, 7, 3, 4, 5, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "t-domain-20261207T030405"); dst != want {
		t.Errorf("kept in %s, want %s", dst, want)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "a-0.log")); err != nil || string(b) != "a log\n" {
		t.Errorf("the log: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dst, "a-0.yaml")); err != nil {
		t.Errorf("the config: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dst, "a-0.sock")); err == nil {
		t.Error("a socket was copied")
	}
	f, err := os.Open(filepath.Join(dst, "false.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []map[string]any
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 1 || lines[0]["ID"] != "false" || lines[0]["scenario"] != "t" {
		t.Fatalf("false.jsonl: %v, want the request named false, of scenario t", lines)
	}
}
