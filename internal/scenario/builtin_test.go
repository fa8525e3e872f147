package scenario

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var wantBuiltins = []string{
	"colocated", "data-stall", "flapping", "frozen", "handshake-fail", "host-blackhole", "idle-eviction",
	"pod-crash", "pod-partial", "rank-crash", "restart", "slow-blackhole", "slow-crash", "slow-crash-1",
	"slow-crash-50", "slow-flapping", "slow-peer", "slow-sibling",
}

func TestBuiltinsParse(t *testing.T) {
	if got := Builtins(); !slices.Equal(got, wantBuiltins) {
		t.Fatalf("Builtins() = %v, want %v", got, wantBuiltins)
	}
	all, err := LoadAll()
	if err != nil {
		t.Fatal(err)
	}
	for i, sc := range all {
		if sc.Name != wantBuiltins[i] {
			t.Errorf("%s.yaml: name %q, want the file's name", wantBuiltins[i], sc.Name)
		}
		if sc.Duration < 20e9 || sc.Duration > 90e9 { // short enough for the demo to replay in wall time
			t.Errorf("%s: duration %v, want 20-90 s", sc.Name, sc.Duration)
		}
		if len(sc.Faults) == 0 {
			t.Errorf("%s: no faults", sc.Name)
		}
		if err := sc.Validate(); err != nil {
			t.Errorf("%s: a parsed built-in fails Validate: %v", sc.Name, err)
		}
	}
}

// The built-ins must document themselves: each opens with a comment naming
// it and saying what it shows.
func TestBuiltinsCommented(t *testing.T) {
	for _, name := range wantBuiltins {
		data, err := os.ReadFile(filepath.Join("..", "..", "scenarios", name+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(data), "# "+name+": ") {
			t.Errorf("%s.yaml does not open with a '# %s: ...' comment", name, name)
		}
	}
}

func TestPodPartialMatchesDesign(t *testing.T) {
	sc, err := Load("pod-partial")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range sc.Faults {
		got = append(got, f.String())
	}
	want := []string{"10s close-control src-a/0", "10s blackhole-data src-a/1-7", "25s heal src-a/*"}
	if !slices.Equal(got, want) {
		t.Errorf("faults = %q, want %q", got, want)
	}
	// 65 s, not design's 40 s: the longest timeout of any policy (30 s + 10 s) lands after the last fault.
	if sc.Duration != 65e9 || sc.Workload.Stop != 30e9 || sc.Workload.Rate != 40 || sc.Workload.BlockBytes != 262144 {
		t.Errorf("workload differs from docs/design.md §7: %+v duration %v", sc.Workload, sc.Duration)
	}
}

func TestLoadPath(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mine.yaml")
	src, err := os.ReadFile(filepath.Join("..", "..", "scenarios", "rank-crash.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(src), "target: src-a/3", "target: src-a/30", 1)
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(path)
	if err == nil || !strings.Contains(err.Error(), "mine.yaml:") || !strings.Contains(err.Error(), "rank 30 out of range") {
		t.Errorf("Load(bad file) = %v", err)
	}
	if _, err := Load("no-such-scenario"); err == nil || !strings.Contains(err.Error(), "pod-partial") {
		t.Errorf("Load(unknown name) = %v, want a list of built-ins", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("Load(missing file) succeeded")
	}
}

// TestSelect: "all" is every built-in, a name is that one.
func TestSelect(t *testing.T) {
	all, err := Select("all")
	if err != nil || len(all) != len(wantBuiltins) {
		t.Fatalf("Select(all) = %d scenarios, %v", len(all), err)
	}
	one, err := Select("rank-crash")
	if err != nil || len(one) != 1 || one[0].Name != "rank-crash" {
		t.Fatalf("Select(rank-crash) = %v, %v", one, err)
	}
	if _, err := Select("no-such-scenario"); err == nil {
		t.Error("Select(unknown) succeeded")
	}
}
