package config

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/health"
	"github.com/kvp2p/kvp2p/internal/loads"
	"github.com/kvp2p/kvp2p/internal/node"
)

const examplePath = "../../examples/kvp2p.yaml"

// TestExampleConfig keeps examples/kvp2p.yaml honest: it loads and
// validates, it sets every field, and the defaults it documents are the
// real ones.
func TestExampleConfig(t *testing.T) {
	cfg, err := Load(examplePath, noEnv, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Non-timer fields are written out at their defaults.
	want := Serve{Config: node.Config{
		PeerID: cfg.PeerID, Policy: node.DefaultPolicy,
		BlockBytes: node.DefaultBlockBytes, Slots: node.DefaultSlots, ChunkBytes: node.DefaultChunkBytes,
	}}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("example config\n got  %+v\n want %+v (every field at its default)", cfg, want)
	}

	text, err := os.ReadFile(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	fields, _ := Fields(&Serve{})
	for path := range fields {
		leaf := path[strings.LastIndex(path, ".")+1:]
		if !regexp.MustCompile(`(?m)^\s*` + leaf + `:`).Match(text) {
			t.Errorf("example does not document %s", path)
		}
	}
}

// TestExampleTimerPresets checks the "domain: X, vllm: Y" comment of every
// timer against the presets the node really uses (vllm: per-peer and
// host-group).
func TestExampleTimerPresets(t *testing.T) {
	text, err := os.ReadFile(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]map[string]string{health.Domain: {}, health.PerPeer: {}, health.HostGroup: {}}
	for _, m := range regexp.MustCompile(`(?m)^\s+(\w+):\s*\S+\s*#\s*domain: ([0-9a-z.]+), vllm: ([0-9a-z.]+);`).FindAllSubmatch(text, -1) {
		docs[health.Domain][string(m[1])] = string(m[2])
		docs[health.PerPeer][string(m[1])] = string(m[3])
		docs[health.HostGroup][string(m[1])] = string(m[3])
	}
	timers := reflect.TypeFor[node.Timers]()
	for _, policy := range []string{health.Domain, health.PerPeer, health.HostGroup} {
		documented := docs[policy]
		preset := reflect.ValueOf(loads.PresetTimers(policy))
		for i := range timers.NumField() {
			f := timers.Field(i)
			name := f.Tag.Get("yaml")
			doc, ok := documented[name]
			if !ok {
				t.Errorf("timers.%s: no \"domain: X, vllm: Y;\" comment in the example", name)
				continue
			}
			real := preset.FieldByName(f.Name)
			if !real.IsValid() {
				t.Errorf("timers.%s: loads.Timers has no field %s", name, f.Name)
				continue
			}
			if f.Type == durationType {
				d, err := time.ParseDuration(doc)
				if err != nil || d != time.Duration(real.Int()) {
					t.Errorf("timers.%s: example says preset %s, the %s preset is %v", name, doc, policy, real.Interface())
				}
			} else if doc != fmt.Sprint(real.Interface()) {
				t.Errorf("timers.%s: example says preset %s, the %s preset is %v", name, doc, policy, real.Interface())
			}
		}
	}
}
