package config

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/kvp2p/kvp2p/internal/node"
	"github.com/kvp2p/kvp2p/internal/sidecar"
)

// Serve is the configuration of `kvp2p serve`: the node's (node.Config,
// the library's Config) and the settings of the listeners the command
// opens for it and beside it. A kvp2p.yaml is one flat document; the
// node's fields sit at its top level next to these.
type Serve struct {
	node.Config `yaml:",inline"`

	// Listen is the address the node's listener binds; default PeerID.
	Listen string `yaml:"listen"`

	// Engine makes the node an engine's sidecar (internal/sidecar).
	Engine sidecar.EngineConfig `yaml:"engine"`

	// MetricsAddr is where `kvp2p serve` serves /metrics, /status.json,
	// the status page (/), /healthz and /readyz, e.g. 127.0.0.1:9464.
	// Empty: off.
	MetricsAddr string `yaml:"metrics_addr"`
}

// Validate checks the config and names the first bad field. A sidecar's
// arena is its engine's region, so it is not held against this machine's
// memory.
func (s *Serve) Validate() error {
	var err error
	if !s.Engine.Enabled() {
		err = s.Config.Validate()
	} else if err = s.Engine.Validate(); err == nil {
		err = node.ValidateWithSidecar(s.Config)
	}
	if err != nil || s.Listen == "" {
		return err
	}
	if _, p, err := net.SplitHostPort(s.Listen); err != nil {
		return fmt.Errorf("kvp2p: config: listen %q: %v", s.Listen, err)
	} else if n, err := strconv.Atoi(p); err != nil || n < 0 || n > 65535 {
		// 0 (any free port) is allowed: peers dial peer_id, not listen.
		return fmt.Errorf("kvp2p: config: listen %q: port must be 0-65535", s.Listen)
	}
	return nil
}

// Error is a configuration refused at start. The kvp2p command exits 2 for it, as for
// a usage error: retrying with the same input cannot succeed.
type Error struct{ err error }

func (e *Error) Error() string { return "config: " + e.err.Error() }
func (e *Error) Unwrap() error { return e.err }

// MachineError is a config that asks for more than the machine has (an
// arena over its memory). The kvp2p command exits 3 for it: distinct from a typo (2),
// so that an orchestrator can tell "fix the config" from "wrong node size".
type MachineError struct{ err error }

func (e *MachineError) Error() string { return "config: " + e.err.Error() }
func (e *MachineError) Unwrap() error { return e.err }

// Errorf is an Error of a formatted message.
func Errorf(format string, args ...any) error {
	return &Error{fmt.Errorf(format, args...)}
}

// EnvPrefix starts every environment override: KVP2P_PEER_ID,
// KVP2P_TIMERS_STALL_TIMEOUT.
const EnvPrefix = "KVP2P_"

// Setting is one override from the environment or a flag, kept with its
// source so that an error can say where the bad value came from.
type Setting struct {
	Source string // "env KVP2P_POLICY", "flag --set"
	Path   string // yaml path: "policy", "timers.stall_timeout"
	Value  string
}

// Load builds the command's config: defaults < file < env < sets, then
// validates it. path may be empty (no file). lookupEnv is os.LookupEnv outside
// tests. Every error is a *Error that names the field.
func Load(path string, lookupEnv func(string) (string, bool), sets []Setting) (Serve, error) {
	var cfg Serve
	fields, groups := Fields(&cfg)
	if path != "" {
		f, err := os.Open(path)
		if err != nil {
			return cfg, &Error{err}
		}
		err = DecodeYAML(f, path, fields, groups)
		f.Close()
		if err != nil {
			return cfg, err
		}
	}
	for _, s := range envSettings(fields, lookupEnv) {
		if err := Apply(fields, s); err != nil {
			return cfg, err
		}
	}
	for _, s := range sets {
		if err := Apply(fields, s); err != nil {
			return cfg, err
		}
	}
	if cfg.PeerID == "" {
		return cfg, Errorf("peer_id is required (host:port): set it in the --config file, %sPEER_ID or --peer-id", EnvPrefix)
	}
	if err := cfg.Validate(); err != nil {
		// Validate speaks for the library ("kvp2p: config: ..."); here the
		// command's own prefix already says both.
		msg := errors.New(strings.TrimPrefix(err.Error(), "kvp2p: config: "))
		if errors.Is(err, node.ErrMachine) {
			return cfg, &MachineError{msg}
		}
		return cfg, &Error{msg}
	}
	return cfg, nil
}

// Fields lists cfg's settable leaves by yaml path ("timers.stall_timeout"),
// and the paths of nested sections ("timers"). It reads the yaml tags, so the
// file, the environment and --set share one name per knob, and a field added
// to node.Config or Serve reaches all three without an edit here. An
// inline field (yaml:",inline") adds its fields at its parent's level.
func Fields(cfg *Serve) (fields map[string]reflect.Value, groups map[string]bool) {
	fields, groups = map[string]reflect.Value{}, map[string]bool{}
	var walk func(prefix string, v reflect.Value)
	walk = func(prefix string, v reflect.Value) {
		t := v.Type()
		for i := range t.NumField() {
			sf := t.Field(i)
			name, opts, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
			if !sf.IsExported() || name == "-" {
				continue
			}
			if opts == "inline" {
				walk(prefix, v.Field(i))
				continue
			}
			if name == "" {
				name = strings.ToLower(sf.Name) // yaml's own default
			}
			p := prefix + name
			if sf.Type.Kind() == reflect.Struct && sf.Type != durationType {
				groups[p] = true
				walk(p+".", v.Field(i))
				continue
			}
			fields[p] = v.Field(i)
		}
	}
	walk("", reflect.ValueOf(cfg).Elem())
	return fields, groups
}

var durationType = reflect.TypeFor[time.Duration]()

// setValue parses s into v. Durations are Go duration strings ("500ms"): a
// bare number is refused rather than read as nanoseconds.
func setValue(v reflect.Value, s string) error {
	switch {
	case v.Type() == durationType:
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%q: invalid duration, want e.g. 500ms or 2s", s)
		}
		v.SetInt(int64(d))
	case v.Kind() == reflect.String:
		v.SetString(s)
	case v.CanInt():
		n, err := strconv.ParseInt(s, 0, v.Type().Bits())
		if err != nil {
			return numError(s, err)
		}
		v.SetInt(n)
	case v.CanUint():
		n, err := strconv.ParseUint(s, 0, v.Type().Bits())
		if err != nil {
			return numError(s, err)
		}
		v.SetUint(n)
	case v.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("%q: invalid boolean", s)
		}
		v.SetBool(b)
	default:
		return fmt.Errorf("type %s has no parser in cmd/kvp2p/config.go", v.Type())
	}
	return nil
}

func numError(s string, err error) error {
	if errors.Is(err, strconv.ErrRange) {
		return fmt.Errorf("%q: out of range", s)
	}
	return fmt.Errorf("%q: invalid integer", s)
}

// Apply sets one override.
func Apply(fields map[string]reflect.Value, s Setting) error {
	v, ok := fields[s.Path]
	if !ok {
		return Errorf("%s: unknown field (%s)", s.Path, s.Source)
	}
	if err := setValue(v, s.Value); err != nil {
		return Errorf("%s: %v (%s)", s.Path, err, s.Source)
	}
	return nil
}

// EnvName is a field's environment variable: KVP2P_TIMERS_STALL_TIMEOUT.
func EnvName(path string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(path, ".", "_"))
}

// envSettings reads the KVP2P_<FIELD> variables, in a fixed order. An empty
// value counts as unset, so that a pod spec or chart that renders a blank
// value falls back to the file instead of failing or blanking the field.
// Unknown KVP2P_* variables are ignored, not refused: Kubernetes injects
// KVP2P_SERVICE_HOST, KVP2P_PORT, ... into every pod when a Service is
// named kvp2p.
func envSettings(fields map[string]reflect.Value, lookupEnv func(string) (string, bool)) []Setting {
	paths := make([]string, 0, len(fields))
	for p := range fields {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var out []Setting
	for _, p := range paths {
		name := EnvName(p)
		if v, ok := lookupEnv(name); ok && v != "" {
			out = append(out, Setting{Source: "env " + name, Path: p, Value: v})
		}
	}
	return out
}

// DecodeYAML reads one YAML document into fields. It walks the node tree
// instead of calling Decode with KnownFields(true), which would be as strict
// but reports neither the full path of a bad field ("timers.stall_timeout")
// nor which knob a bad duration belongs to.
func DecodeYAML(r io.Reader, name string, fields map[string]reflect.Value, groups map[string]bool) error {
	dec := yaml.NewDecoder(r)
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file is an empty config
		}
		return Errorf("%s: %v", name, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return Errorf("%s: want one YAML document, found more", name)
	}
	root := deref(&doc)
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil // only comments
		}
		root = deref(root.Content[0])
	}
	if isNull(root) {
		return nil
	}
	return decodeMapping(root, "", name, fields, groups)
}

func decodeMapping(n *yaml.Node, prefix, name string, fields map[string]reflect.Value, groups map[string]bool) error {
	where := func(n *yaml.Node) string { return fmt.Sprintf("%s:%d", name, n.Line) }
	if n.Kind != yaml.MappingNode {
		field := strings.TrimSuffix(prefix, ".")
		if field == "" {
			return Errorf("%s: want a mapping of fields at the top level", where(n))
		}
		return Errorf("%s: want a mapping of fields (%s)", field, where(n))
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		p := prefix + k.Value
		if seen[p] {
			return Errorf("%s: set twice (%s)", p, where(k))
		}
		seen[p] = true
		switch {
		case groups[p]:
			if isNull(v) {
				continue
			}
			if err := decodeMapping(v, p+".", name, fields, groups); err != nil {
				return err
			}
		case fields[p].IsValid():
			if isNull(v) {
				continue // "listen:" with no value keeps the default
			}
			if v.Kind != yaml.ScalarNode {
				return Errorf("%s: want a single value (%s)", p, where(v))
			}
			if err := setValue(fields[p], v.Value); err != nil {
				return Errorf("%s: %v (%s)", p, err, where(v))
			}
		default:
			return Errorf("%s: unknown field (%s)", p, where(k))
		}
	}
	return nil
}

// deref follows YAML aliases (*anchor) to the node they name.
func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }
