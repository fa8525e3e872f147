package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/node"
	"github.com/kvp2p/kvp2p/internal/nodetest"
	"github.com/kvp2p/kvp2p/internal/sidecar"
)

func noEnv(string) (string, bool) { return "", false }

func flagSet(path, value string) Setting {
	return Setting{Source: "flag --set", Path: path, Value: value}
}

const baseYAML = `
peer_id: "10.0.0.1:7600"
policy: per-peer
failure_domain: from-file
timers:
  stall_timeout: 3s
  heartbeat_interval: 250ms
`

// TestPrecedence checks defaults < file < env < flags, field by field.
func TestPrecedence(t *testing.T) {
	tests := []struct {
		name string
		file string // "" means no --config
		env  map[string]string
		sets []Setting
		want func(*Serve)
	}{
		{
			name: "file only",
			file: baseYAML,
			want: func(c *Serve) {},
		},
		{
			name: "env over file",
			file: baseYAML,
			env: map[string]string{
				"KVP2P_FAILURE_DOMAIN":       "from-env",
				"KVP2P_TIMERS_STALL_TIMEOUT": "1s",
				"KVP2P_POLICY":               "host-group",
			},
			want: func(c *Serve) {
				c.FailureDomain, c.Timers.StallTimeout, c.Policy = "from-env", time.Second, "host-group"
			},
		},
		{
			name: "flags over env over file",
			file: baseYAML,
			env:  map[string]string{"KVP2P_FAILURE_DOMAIN": "from-env", "KVP2P_TIMERS_STALL_TIMEOUT": "1s"},
			sets: []Setting{
				{Source: "flag --failure-domain", Path: "failure_domain", Value: "from-flag"},
				flagSet("timers.stall_timeout", "-1s"),
			},
			want: func(c *Serve) {
				c.FailureDomain, c.Timers.StallTimeout = "from-flag", -time.Second
			},
		},
		{
			name: "last flag wins",
			file: baseYAML,
			sets: []Setting{
				{Source: "flag --policy", Path: "policy", Value: "host-group"},
				flagSet("policy", "per-peer"),
			},
			want: func(c *Serve) {},
		},
		{
			name: "empty env value is unset",
			file: baseYAML,
			env:  map[string]string{"KVP2P_FAILURE_DOMAIN": "", "KVP2P_TIMERS_STALL_TIMEOUT": ""},
			want: func(c *Serve) {},
		},
		{
			// Kubernetes injects these for a Service named kvp2p.
			name: "unknown KVP2P_ variables are ignored",
			file: baseYAML,
			env:  map[string]string{"KVP2P_SERVICE_HOST": "10.96.0.1", "KVP2P_PORT": "tcp://10.96.0.1:7600"},
			want: func(c *Serve) {},
		},
		{
			name: "no file: env and flags give peer_id",
			env:  map[string]string{"KVP2P_PEER_ID": "10.0.0.2:7600", "KVP2P_SLOTS": "64"},
			sets: []Setting{flagSet("timers.max_peers", "8"), flagSet("incarnation", "0x2a")},
			want: func(c *Serve) {
				c.Config = node.Config{PeerID: "10.0.0.2:7600", Slots: 64, Incarnation: 42}
				c.Timers.MaxPeers = 8
			},
		},
		{
			// The command's own settings sit in the same flat file.
			name: "engine and metrics_addr",
			file: baseYAML + "listen: 0.0.0.0:7600\nmetrics_addr: 127.0.0.1:9464\nengine:\n  socket: /run/kvp2p/engine.sock\n  max_jobs: 8\n",
			env:  map[string]string{"KVP2P_ENGINE_SERVE_TIMEOUT": "2s"},
			sets: []Setting{flagSet("metrics_addr", "127.0.0.1:9465")},
			want: func(c *Serve) {
				c.Listen, c.MetricsAddr = "0.0.0.0:7600", "127.0.0.1:9465"
				c.Engine = sidecar.EngineConfig{Socket: "/run/kvp2p/engine.sock", MaxJobs: 8, ServeTimeout: 2 * time.Second}
			},
		},
		{
			name: "empty file",
			file: "# nothing but a comment\n",
			sets: []Setting{flagSet("peer_id", "h:1")},
			want: func(c *Serve) { c.Config = node.Config{PeerID: "h:1"} },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			path := ""
			if tt.file != "" {
				path = nodetest.WriteConfig(t, tt.file)
			}
			got, err := Load(path, os.LookupEnv, tt.sets)
			if err != nil {
				t.Fatal(err)
			}
			want := Serve{Config: node.Config{PeerID: "10.0.0.1:7600", Policy: "per-peer", FailureDomain: "from-file"}}
			want.Timers.StallTimeout, want.Timers.HeartbeatInterval = 3*time.Second, 250*time.Millisecond
			tt.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

// TestConfigErrors checks that every refusal is a *Error whose message
// names the field (or, for YAML syntax, the file) and the problem.
func TestConfigErrors(t *testing.T) {
	const peer = "peer_id: \"10.0.0.1:7600\"\n"
	tests := []struct {
		name string
		file string
		env  map[string]string
		sets []Setting
		want string // the message after "config: "
	}{
		{"missing peer_id", "policy: per-peer\n", nil, nil, "peer_id is required"},
		{"peer_id without port", "peer_id: 10.0.0.1\n", nil, nil, `peer_id "10.0.0.1": address 10.0.0.1: missing port`},
		{"peer_id bad port", "peer_id: 10.0.0.1:99999\n", nil, nil, `peer_id "10.0.0.1:99999": port must be 1-65535`},
		{"peer_id port 0", "peer_id: 10.0.0.1:0\n", nil, nil, `peer_id "10.0.0.1:0": port must be 1-65535`},
		{"peer_id without host", "peer_id: :7600\n", nil, nil, `peer_id ":7600": host is required`},
		{"listen bad port", peer + "listen: 0.0.0.0:http\n", nil, nil, `listen "0.0.0.0:http": port must be 0-65535`},
		{"unknown field", peer + "peerid: x\n", nil, nil, "peerid: unknown field (kvp2p.yaml:2)"},
		{"unknown timer", peer + "timers:\n  stall_timout: 1s\n", nil, nil, "timers.stall_timout: unknown field (kvp2p.yaml:3)"},
		{"bad duration", peer + "timers:\n  stall_timeout: abc\n", nil, nil, `timers.stall_timeout: "abc": invalid duration`},
		{"duration without unit", peer + "timers:\n  heartbeat_interval: 500\n", nil, nil, `timers.heartbeat_interval: "500": invalid duration`},
		{"negative timer", peer + "timers:\n  idle_timeout: -1s\n", nil, nil, "timers.idle_timeout -1s: must not be negative"},
		{"bad integer", peer + "slots: many\n", nil, nil, `slots: "many": invalid integer`},
		{"integer out of range", peer + "incarnation: -1\n", nil, nil, `incarnation: "-1": invalid integer`},
		{"block_bytes too big", peer + "block_bytes: 1073741824\n", nil, nil, "block_bytes 1073741824: must be 1.."},
		{"bad policy", peer + "policy: domian\n", nil, nil, `policy: health: unknown policy "domian"`},
		{"timers not a mapping", peer + "timers: 1s\n", nil, nil, "timers: want a mapping of fields"},
		{"list for a scalar", peer + "policy: [per-peer]\n", nil, nil, "policy: want a single value"},
		{"set twice", peer + "slots: 1\nslots: 2\n", nil, nil, "slots: set twice (kvp2p.yaml:3)"},
		{"not a mapping", "- peer_id\n", nil, nil, "kvp2p.yaml:1: want a mapping of fields at the top level"},
		{"yaml syntax", peer + "timers: [\n", nil, nil, "kvp2p.yaml: yaml: line"},
		{"two documents", peer + "---\n" + peer, nil, nil, "kvp2p.yaml: want one YAML document"},
		{"bad duration from env", peer, map[string]string{"KVP2P_TIMERS_STALL_TIMEOUT": "abc"}, nil,
			`timers.stall_timeout: "abc": invalid duration, want e.g. 500ms or 2s (env KVP2P_TIMERS_STALL_TIMEOUT)`},
		{"bad duration from flag", peer, nil, []Setting{flagSet("timers.stall_timeout", "1")},
			`timers.stall_timeout: "1": invalid duration, want e.g. 500ms or 2s (flag --set)`},
		{"unknown field from flag", peer, nil, []Setting{flagSet("timers.stall", "1s")},
			"timers.stall: unknown field (flag --set)"},
		{"relative engine socket", peer + "engine:\n  socket: engine.sock\n", nil, nil, `engine.socket "engine.sock": must be an absolute path`},
		{"engine max_jobs", peer + "engine:\n  addr: 127.0.0.1:7700\n  max_jobs: -1\n", nil, nil, "engine.max_jobs -1: must be 0.."},
		{"bad port from flag", "", nil, []Setting{{Source: "flag --peer-id", Path: "peer_id", Value: "h:70000"}},
			`peer_id "h:70000": port must be 1-65535`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			path := ""
			if tt.file != "" {
				path = nodetest.WriteConfig(t, tt.file)
			}
			_, err := Load(path, os.LookupEnv, tt.sets)
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v (%T), want a *Error", err, err)
			}
			msg := strings.ReplaceAll(err.Error(), filepath.Dir(path)+string(filepath.Separator), "")
			if !strings.HasPrefix(msg, "config: "+tt.want) {
				t.Errorf("err = %q\nwant prefix %q", msg, "config: "+tt.want)
			}
		})
	}
}

// TestEveryFieldSettable guards Fields and setValue against a new
// node.Config or Serve field of a type they cannot parse: each leaf must
// take the string form of its zero value, from the environment and from
// --set.
func TestEveryFieldSettable(t *testing.T) {
	var cfg Serve
	fields, groups := Fields(&cfg)
	if !groups["timers"] || !groups["engine"] || len(fields) < 20 {
		t.Fatalf("Fields found %d fields and groups %v; want every yaml field of Serve", len(fields), groups)
	}
	for _, p := range []string{"peer_id", "listen", "timers.stall_timeout", "engine.socket", "metrics_addr"} {
		if !fields[p].IsValid() {
			t.Errorf("Fields has no %s", p)
		}
	}
	for path, v := range fields {
		zero := fmt.Sprint(reflect.Zero(v.Type()).Interface()) // "0s", "0", ""
		if err := setValue(v, zero); err != nil {
			t.Errorf("%s (%s): %v", path, EnvName(path), err)
		}
	}
	if got := EnvName("timers.stall_timeout"); got != "KVP2P_TIMERS_STALL_TIMEOUT" {
		t.Errorf("EnvName = %s", got)
	}
}
