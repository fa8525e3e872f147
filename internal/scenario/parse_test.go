package scenario

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/scenarios"
)

// base is a valid scenario; the bad-input table edits it line by line, so
// the line numbers in the expected messages refer to this text.
const base = `name: t
duration: 40s
pods:
  - {name: src-a, host: 10.0.0.1, ranks: 8, base_port: 7777, domain: pod-a}
  - {name: src-b, host: 10.0.0.1, ranks: 2, base_port: 8777}
  - {name: dst, host: 10.0.0.2, ranks: 1}
workload:
  rate: 40
  sources: [src-a, src-b]
  consumers: [dst]
faults:
  - {at: 25s, kind: heal, target: src-a/*}
  - {at: 10s, kind: close-control, target: src-a/0}
  - {at: 10s, kind: blackhole-data, target: src-a/1-7}
`

// edit replaces line n (1-based) of base; an empty repl deletes it.
func edit(n int, repl string) string {
	lines := strings.Split(base, "\n")
	if repl == "" {
		lines = append(lines[:n-1], lines[n:]...)
	} else {
		lines[n-1] = repl
	}
	return strings.Join(lines, "\n")
}

func TestParseDefaultsAndOrder(t *testing.T) {
	sc, err := Parse([]byte(base), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	w := sc.Workload
	if sc.Seed != 1 || w.Mode != ModePD || w.Blocks != 16 || w.BlockBytes != 262144 || w.Start != 0 || w.Stop != 40*time.Second {
		t.Errorf("defaults not applied: seed %d %+v", sc.Seed, w)
	}
	if sc.Pods[2].BasePort != 7777 || sc.Pods[1].Domain != "" {
		t.Errorf("pod defaults: %+v", sc.Pods)
	}
	var order []string
	for _, f := range sc.Faults {
		order = append(order, f.String())
	}
	want := "10s close-control src-a/0|10s blackhole-data src-a/1-7|25s heal src-a/*"
	if got := strings.Join(order, "|"); got != want {
		t.Errorf("faults not sorted stably by time:\n got %s\nwant %s", got, want)
	}
	if sc.Faults[0].Line != 13 || sc.Faults[2].Line != 12 {
		t.Errorf("fault lines %d, %d; want 13, 12", sc.Faults[0].Line, sc.Faults[2].Line)
	}
	if all := sc.Faults[2].Target; !all.All || all.First != 0 || all.Last != 7 {
		t.Errorf("pod/* not resolved to the pod's ranks: %+v", all)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     string // a substring of the message: file, line, field and the problem
	}{
		{"empty", "", "t.yaml:1: empty scenario"},
		{"comment only", "# nothing\n", "t.yaml:1: empty scenario"},
		{"bad utf8", "name: t\nduration: \xff\n", "t.yaml:2: bad YAML"},
		{"control char", "name: t\n\n x\x01\n", "t.yaml:3: bad YAML"},
		{"scalar", "hello\n", "t.yaml:1: want a mapping of fields"},
		{"list", "- a\n- b\n", "t.yaml:1: want a mapping of fields"},
		{"syntax", "name: [a\n", "t.yaml:"},
		{"tab", "name: t\n\tduration: 4s\n", "t.yaml:"},
		{"two docs", base + "---\nname: u\n", "t.yaml:15: more than one YAML document"},
		{"alias", edit(9, "  sources: &s [src-a]"), "t.yaml:9: anchors and aliases"},
		{"unknown top", edit(2, "dration: 40s"), `t.yaml:2: dration: unknown field "dration" in the scenario`},
		{"duplicate top", edit(3, "duration: 30s\npods:"), "t.yaml:3: duration: duplicate field (first given at line 2)"},
		{"duplicate in flow", edit(6, "  - {name: dst, host: 10.0.0.2, ranks: 1, ranks: 2}"), "t.yaml:6: pods[2].ranks: duplicate field"},
		{"missing name", edit(1, "seed: 3"), "t.yaml:1: name: missing (required)"},
		{"missing duration", edit(2, ""), "duration: missing (required)"},
		{"missing host", edit(6, "  - {name: dst, ranks: 1}"), "t.yaml:6: pods[2].host: missing (required)"},
		{"missing rate", edit(8, ""), "t.yaml:7: workload.rate: missing (required)"},
		{"missing target", edit(13, "  - {at: 10s, kind: close-control}"), "t.yaml:13: faults[1].target: missing (required)"},
		{"unknown pod field", edit(6, "  - {name: dst, host: 10.0.0.2, ranks: 1, zone: a}"), `t.yaml:6: pods[2].zone: unknown field "zone"`},
		{"unknown fault field", edit(13, "  - {at: 10s, kind: close-control, target: src-a/0, bytes: 3}"), `faults[1].bytes: unknown field`},
		{"duration bare number", edit(2, "duration: 40"), `t.yaml:2: duration: want a duration such as 10s, 1.5s or 250ms, got "40"`},
		{"duration zero", edit(2, "duration: 0s"), "t.yaml:2: duration: 0s: a run must last longer than 0s"},
		{"duration negative", edit(2, "duration: -4s"), "t.yaml:2: duration: -4s"},
		{"name null", edit(1, "name:"), "t.yaml:1: name: want a value, got nothing"},
		{"name bad", edit(1, "name: a b"), `t.yaml:1: name: "a b": want a name`},
		{"seed float", edit(1, "name: t\nseed: 1.5"), `t.yaml:2: seed: want a whole number, got "1.5"`},
		{"pods not list", "name: t\nduration: 4s\npods: 3\nworkload: {}\n", "t.yaml:3: pods: want a list of pods"},
		{"pods empty", strings.Replace(base, "pods:\n  - {name: src-a, host: 10.0.0.1, ranks: 8, base_port: 7777, domain: pod-a}\n  - {name: src-b, host: 10.0.0.1, ranks: 2, base_port: 8777}\n  - {name: dst, host: 10.0.0.2, ranks: 1}", "pods: []", 1), "pods: no pods"},
		{"pod not mapping", edit(6, "  - dst"), `t.yaml:6: pods[2]: want a mapping of fields`},
		{"ranks string", edit(6, `  - {name: dst, host: 10.0.0.2, ranks: "1"}`), `t.yaml:6: pods[2].ranks: want a whole number, got "1"`},
		{"ranks zero", edit(6, "  - {name: dst, host: 10.0.0.2, ranks: 0}"), "t.yaml:6: pods[2].ranks: 0: want 1..4096 ranks"},
		{"ranks huge", edit(6, "  - {name: dst, host: 10.0.0.2, ranks: 99999999999999}"), "t.yaml:6: pods[2].ranks: 99999999999999 is out of range"},
		{"port zero", edit(6, "  - {name: dst, host: 10.0.0.2, ranks: 1, base_port: 0}"), "t.yaml:6: pods[2].base_port: 0: want a port in 1..65535"},
		{"port high", edit(6, "  - {name: dst, host: 10.0.0.2, ranks: 1, base_port: 70000}"), "t.yaml:6: pods[2].base_port: 70000: want a port"},
		{"ports past 65535", edit(6, "  - {name: dst, host: 10.0.0.2, ranks: 4, base_port: 65534}"), "t.yaml:6: pods[2].base_port: 65534: its 4 ranks would need ports up to 65537"},
		{"ports overlap", edit(5, "  - {name: src-b, host: 10.0.0.1, ranks: 2, base_port: 7784}"), "t.yaml:5: pods[1].base_port: ports 7784-7785 on host 10.0.0.1 overlap pod src-a (ports 7777-7784)"},
		{"duplicate pod", edit(5, "  - {name: src-a, host: 10.0.0.3, ranks: 2}"), `t.yaml:5: pods[1].name: duplicate pod name "src-a"`},
		{"pod name slash", edit(6, "  - {name: d/st, host: 10.0.0.2, ranks: 1}"), `t.yaml:6: pods[2].name: "d/st": want a name`},
		{"host empty", edit(6, `  - {name: dst, host: "", ranks: 1}`), `t.yaml:6: pods[2].host: "": want a host`},
		{"mode", edit(8, "  rate: 40\n  mode: both"), `t.yaml:9: workload.mode: "both": want pd, symmetric or mixed`},
		{"rate zero", edit(8, "  rate: 0"), "t.yaml:8: workload.rate: 0: want more than 0"},
		{"rate negative", edit(8, "  rate: -2.5"), "t.yaml:8: workload.rate: -2.5"},
		{"rate nan", edit(8, "  rate: .nan"), `t.yaml:8: workload.rate: want a number, got ".nan"`},
		{"rate text", edit(8, "  rate: fast"), `t.yaml:8: workload.rate: want a number, got "fast"`},
		{"blocks zero", edit(8, "  rate: 40\n  blocks: 0"), "t.yaml:9: workload.blocks: 0: want 1..65536"},
		{"block_bytes zero", edit(8, "  rate: 40\n  block_bytes: 0"), "t.yaml:9: workload.block_bytes: 0: want 1..268435456"},
		{"block_bytes huge", edit(8, "  rate: 40\n  block_bytes: 268435457"), "t.yaml:9: workload.block_bytes: 268435457"},
		{"unknown source", edit(9, "  sources: [src-a, src-c]"), `t.yaml:9: workload.sources[1]: unknown pod "src-c" (pods: dst, src-a, src-b)`},
		{"source twice", edit(9, "  sources: [src-a, src-a]"), `t.yaml:9: workload.sources[1]: pod "src-a" listed twice`},
		{"sources empty", edit(9, "  sources: []"), "t.yaml:9: workload.sources: empty"},
		{"sources scalar", edit(9, "  sources: src-a"), `t.yaml:9: workload.sources: want a list of pod names, got "src-a"`},
		{"unknown consumer", edit(10, "  consumers: [dsx]"), `t.yaml:10: workload.consumers[0]: unknown pod "dsx"`},
		{"overlap", edit(10, "  consumers: [dst, src-b]"), `t.yaml:10: workload.consumers[1]: "src-b" is also a source`},
		{"start negative", edit(8, "  rate: 40\n  start: -1s"), "t.yaml:9: workload.start: negative time -1s"},
		{"stop before start", edit(8, "  rate: 40\n  start: 20s\n  stop: 10s"), "t.yaml:10: workload.stop: 10s is not after start 20s"},
		{"stop beyond", edit(8, "  rate: 40\n  stop: 50s"), "t.yaml:9: workload.stop: 50s is beyond the run's duration 40s"},
		{"start beyond default stop", edit(8, "  rate: 40\n  start: 45s"), "t.yaml:7: workload.stop: 40s is not after start 45s"},
		{"faults not list", base[:strings.Index(base, "faults:")] + "faults: {}\n", "t.yaml:11: faults: want a list of faults"},
		{"workload missing", strings.Replace(base, "workload:", "workloads:", 1), "t.yaml:1: workload: missing (required)"},
		{"fault at beyond", edit(13, "  - {at: 41s, kind: close-control, target: src-a/0}"), "t.yaml:13: faults[1].at: 41s is beyond the run's duration 40s"},
		{"fault at negative", edit(13, "  - {at: -1s, kind: close-control, target: src-a/0}"), "t.yaml:13: faults[1].at: negative time -1s"},
		{"fault kind", edit(13, "  - {at: 10s, kind: explode, target: src-a/0}"), `t.yaml:13: faults[1].kind: unknown fault kind "explode" (want one of: crash,`},
		{"target rank", edit(13, "  - {at: 10s, kind: crash, target: src-a/9}"), `t.yaml:13: faults[1].target: "src-a/9": rank 9 out of range (src-a has 8 ranks)`},
		{"target range", edit(14, "  - {at: 10s, kind: blackhole-data, target: src-a/1-8}"), `t.yaml:14: faults[2].target: "src-a/1-8": rank 8 out of range (src-a has 8 ranks)`},
		{"target reversed", edit(14, "  - {at: 10s, kind: blackhole-data, target: src-a/7-1}"), `t.yaml:14: faults[2].target: "src-a/7-1": empty rank range: 7 > 1`},
		{"target pod", edit(13, "  - {at: 10s, kind: crash, target: src-z/0}"), `t.yaml:13: faults[1].target: "src-z/0": unknown pod "src-z"`},
		{"target no slash", edit(13, "  - {at: 10s, kind: crash, target: src-a}"), `t.yaml:13: faults[1].target: "src-a": want pod/rank`},
		{"target negative", edit(13, "  - {at: 10s, kind: crash, target: src-a/-1}"), `t.yaml:13: faults[1].target: "src-a/-1": bad rank ""`},
		{"target plus", edit(13, "  - {at: 10s, kind: crash, target: src-a/+1}"), `t.yaml:13: faults[1].target: "src-a/+1": bad rank "+1"`},
		{"target number", edit(13, "  - {at: 10s, kind: crash, target: 3}"), `t.yaml:13: faults[1].target: "3": want pod/rank`},
		{"slow no rate", edit(13, "  - {at: 10s, kind: slow, target: src-a/0}"), "t.yaml:13: faults[1].bytes_per_sec: slow needs bytes_per_sec > 0, got 0"},
		{"slow negative", edit(13, "  - {at: 10s, kind: slow, target: src-a/0, bytes_per_sec: -5}"), "t.yaml:13: faults[1].bytes_per_sec: slow needs bytes_per_sec > 0, got -5"},
		{"rate on crash", edit(13, "  - {at: 10s, kind: crash, target: src-a/0, bytes_per_sec: 5}"), "t.yaml:13: faults[1].bytes_per_sec: only a slow fault takes bytes_per_sec (this is crash)"},
		{"delay no latency", edit(13, "  - {at: 10s, kind: delay, target: src-a/0}"), "t.yaml:13: faults[1].latency: delay needs latency > 0, got 0s"},
		{"delay bad latency", edit(13, "  - {at: 10s, kind: delay, target: src-a/0, latency: 5}"), `t.yaml:13: faults[1].latency: want a duration such as 10s, 1.5s or 250ms, got "5"`},
		{"latency on stall", edit(13, "  - {at: 10s, kind: stall, target: src-a/0, latency: 5ms}"), "t.yaml:13: faults[1].latency: only a delay fault takes latency (this is stall)"},
		{"heal before fault", edit(12, "  - {at: 5s, kind: heal, target: src-a/*}"), "t.yaml:12: faults[0]: heal of src-a/* at 5s heals nothing"},
		{"heal of instant", edit(14, ""), "t.yaml:12: faults[0]: heal of src-a/* at 25s heals nothing"},
		{"key not scalar", edit(1, "[a]: t"), "t.yaml:1: field names must be plain words"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc, err := Parse([]byte(tc.in), "t.yaml")
			if err == nil {
				t.Fatalf("no error; parsed %+v", sc)
			}
			if sc != nil {
				t.Errorf("a scenario returned with the error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error\n  %v\nwant it to contain\n  %s", err, tc.want)
			}
			var e *Error
			if !errors.As(err, &e) || e.File != "t.yaml" {
				t.Errorf("error %v is not an *Error naming the file", err)
			}
		})
	}
}

// Every problem in a file is reported at once, in line order.
func TestParseReportsAllErrors(t *testing.T) {
	in := edit(8, "  rate: 0\n  blocks: -1")
	in = strings.Replace(in, "ranks: 1}", "ranks: 0}", 1)
	_, err := Parse([]byte(in), "t.yaml")
	var l ErrorList
	if !errors.As(err, &l) || len(l) != 3 {
		t.Fatalf("got %v, want three errors", err)
	}
	for i, line := range []int{6, 8, 9} {
		if l[i].Line != line {
			t.Errorf("error %d at line %d, want %d: %v", i, l[i].Line, line, l[i])
		}
	}
}

func TestParseTooLarge(t *testing.T) {
	_, err := Parse(make([]byte, maxFileBytes+1), "big.yaml")
	if err == nil || !strings.Contains(err.Error(), "big.yaml: file is") {
		t.Errorf("got %v", err)
	}
}

func TestValidateInCode(t *testing.T) {
	sc, err := Parse([]byte(base), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Validate(); err != nil {
		t.Fatalf("Validate of a parsed scenario: %v", err)
	}
	sc.Workload.Rate = 0
	if err := sc.Validate(); err == nil || err.Error() != "workload.rate: 0: want more than 0 requests per second per consumer rank" {
		t.Errorf("Validate = %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(base))
	for _, name := range Builtins() {
		data, err := scenarios.FS.ReadFile(name + ".yaml")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("name: x\nduration: 1s\n"))
	f.Add([]byte("{a: *b}"))
	f.Add([]byte("faults: [{target: a/1-}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		sc, err := Parse(data, "f.yaml")
		if (sc == nil) == (err == nil) {
			t.Fatalf("Parse returned scenario %v and error %v", sc != nil, err)
		}
		if err != nil {
			var l ErrorList
			if !errors.As(err, &l) || len(l) == 0 {
				t.Fatalf("error is not an ErrorList: %v", err)
			}
			for _, e := range l {
				if e.File != "f.yaml" || e.Line < 1 {
					t.Fatalf("error does not name the file and line: %v", e)
				}
			}
			return
		}
		if err := sc.Validate(); err != nil {
			t.Fatalf("parsed scenario fails Validate: %v", err)
		}
		for i := 1; i < len(sc.Faults); i++ {
			if sc.Faults[i].At < sc.Faults[i-1].At {
				t.Fatal("faults not sorted")
			}
		}
	})
}
