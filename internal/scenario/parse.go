package scenario

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Defaults for fields a scenario may leave out (docs/design.md §7).
const (
	DefaultSeed       = 1
	DefaultMode       = ModePD
	DefaultBlocks     = 16
	DefaultBlockBytes = 256 << 10
	DefaultBasePort   = 7777
)

// Limits. They exist so that a typo ("blocks: 1600000") fails here with a
// line number rather than as an out-of-memory in the simulator.
const (
	MaxBlockBytes = 256 << 20
	MaxBlocks     = 1 << 16
	MaxRanks      = 4096
	maxFileBytes  = 1 << 20
)

// Parse reads one scenario file (docs/design.md §7), applies the defaults and
// validates it. file is only used in messages. Every problem is reported as
// an *Error naming the file, line and field; all of them are returned
// together as an ErrorList. Parse never panics, whatever the input.
func Parse(data []byte, file string) (sc *Scenario, err error) {
	p := &parser{file: file, lines: map[string]int{"": 1}, keys: map[string]int{}}
	if len(data) > maxFileBytes {
		return nil, ErrorList{{File: file, Msg: fmt.Sprintf("file is %d bytes, more than the %d a scenario may have", len(data), maxFileBytes)}}
	}
	root := p.decode(data)
	p.data = nil
	if root != nil {
		sc = p.scenario(root)
	}
	if len(p.errs) == 0 {
		p.validate(sc)
	}
	if len(p.errs) > 0 {
		slices.SortStableFunc(p.errs, func(a, b *Error) int { return a.Line - b.Line })
		return nil, p.errs
	}
	p.normalize(sc)
	return sc, nil
}

// parser walks the yaml.v3 node tree itself, rather than unmarshalling into
// tagged structs, because only the nodes know the line of each value, and
// because unknown and duplicate keys must be errors, not silently ignored.
type parser struct {
	file  string
	errs  ErrorList
	lines map[string]int // field path -> line of its value, for validation messages
	keys  map[string]int // field path -> line of its key
	data  []byte         // the input, while decoding, to locate errors the library gives no line for
}

// errorf records a problem at node n (or at the line last seen for path
// when n is nil).
func (p *parser) errorf(n *yaml.Node, path, format string, args ...any) {
	line := p.line(path)
	if n != nil {
		line = n.Line
	}
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Field: path, Msg: fmt.Sprintf(format, args...)})
}

// line finds the line of path or, for a field left out, the line of the
// nearest enclosing key ("workload:"), which is where a person would add it.
func (p *parser) line(path string) int {
	if l, ok := p.lines[path]; ok {
		return l
	}
	for path != "" {
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
		if l, ok := p.keys[path]; ok {
			return l
		}
		if l, ok := p.lines[path]; ok {
			return l
		}
	}
	return p.lines[""]
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// decode turns the bytes into the top-level mapping node, reporting syntax
// errors with their line, more than one document, and anchors or aliases
// (which would let a small file expand into a huge one, and which the
// walker does not need).
func (p *parser) decode(data []byte) (root *yaml.Node) {
	defer func() {
		// The yaml library is fuzzed upstream, but a scenario parser must
		// never take a process down: turn any panic into an error.
		if r := recover(); r != nil {
			root = nil
			p.errorf(nil, "", "malformed YAML (%v)", r)
		}
	}()
	p.data = data
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.errorf(nil, "", "empty scenario: want a mapping with at least name, duration, pods and workload")
		} else {
			p.yamlError(err)
		}
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		p.errorf(&extra, "", "more than one YAML document: a scenario file holds exactly one")
		return nil
	} else if !errors.Is(err, io.EOF) {
		p.yamlError(err)
		return nil
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		p.errorf(&doc, "", "empty scenario")
		return nil
	}
	if n := findAlias(&doc, 0); n != nil {
		p.errorf(n, "", "anchors and aliases are not supported in scenario files")
		return nil
	}
	p.lines[""] = doc.Content[0].Line
	return doc.Content[0]
}

// yamlError re-shapes the library's "yaml: line 3: ..." into file:3: ....
// A few library errors carry no line (bad UTF-8, control characters);
// those get the line of the first such byte, or line 1.
func (p *parser) yamlError(err error) {
	msg := err.Error()
	line := 0
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = strings.TrimPrefix(msg, m[0])
	}
	if line <= 0 {
		line = badByteLine(p.data)
	}
	msg = strings.TrimPrefix(msg, "yaml: ")
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Msg: "bad YAML: " + msg})
}

// badByteLine is the line of the first byte YAML rejects outright, or 1.
func badByteLine(data []byte) int {
	line := 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size <= 1 || r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0x7f {
			return line
		}
		if r == '\n' {
			line++
		}
		i += size
	}
	return 1
}

func findAlias(n *yaml.Node, depth int) *yaml.Node {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		return n
	}
	if depth > 100 {
		return n // nothing legitimate nests this deep
	}
	for _, c := range n.Content {
		if a := findAlias(c, depth+1); a != nil {
			return a
		}
	}
	return nil
}

// fields checks that n is a mapping whose keys are all known and unique,
// and returns each key's value node. Missing keys are simply absent.
func (p *parser) fields(n *yaml.Node, path string, known ...string) map[string]*yaml.Node {
	what := path
	if what == "" {
		what = "the scenario"
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, path, "want a mapping of fields (%s), got %s", strings.Join(known, ", "), kindName(n))
		return nil
	}
	out := map[string]*yaml.Node{}
	keyLine := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Tag == "!!null" && k.Value == "" {
			p.errorf(k, path, "field names must be plain words, got %s", kindName(k))
			continue
		}
		name := k.Value
		sub := join(path, name)
		if !slices.Contains(known, name) {
			p.errorf(k, sub, "unknown field %q in %s (want one of: %s)", name, what, strings.Join(known, ", "))
			continue
		}
		if first, dup := keyLine[name]; dup {
			p.errorf(k, sub, "duplicate field (first given at line %d)", first)
			continue
		}
		keyLine[name] = k.Line
		out[name] = v
		p.lines[sub] = v.Line
		p.keys[sub] = k.Line
	}
	return out
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return strconv.Quote(n.Value)
	}
	return "something else"
}

// require reports each named field that is missing from m, at the line
// of the key that holds m ("workload:"), which is where a person looks.
func (p *parser) require(n *yaml.Node, m map[string]*yaml.Node, path string, names ...string) bool {
	line := n.Line
	if l, ok := p.keys[path]; ok {
		line = l
	}
	ok := true
	for _, name := range names {
		if _, has := m[name]; !has {
			p.errs = append(p.errs, &Error{File: p.file, Line: line, Field: join(path, name), Msg: "missing (required)"})
			ok = false
		}
	}
	return ok
}

func (p *parser) scalar(n *yaml.Node, path string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.errorf(n, path, "want a value, got %s", kindName(n))
		return "", false
	}
	return n.Value, true
}

func (p *parser) str(n *yaml.Node, path string) string {
	s, _ := p.scalar(n, path)
	return s
}

func (p *parser) integer(n *yaml.Node, path string) int64 {
	if _, ok := p.scalar(n, path); !ok {
		return 0
	}
	var v int64
	if n.Tag != "!!int" || n.Decode(&v) != nil {
		p.errorf(n, path, "want a whole number, got %q", n.Value)
		return 0
	}
	return v
}

// small is integer for fields that are counts or ports, so that a value
// that fits int64 but not a sane int is a clear error, not an overflow.
func (p *parser) small(n *yaml.Node, path string) int {
	v := p.integer(n, path)
	if v < -1<<30 || v > 1<<30 {
		p.errorf(n, path, "%d is out of range", v)
		return 0
	}
	return int(v)
}

func (p *parser) float(n *yaml.Node, path string) float64 {
	if _, ok := p.scalar(n, path); !ok {
		return 0
	}
	var v float64
	if (n.Tag != "!!int" && n.Tag != "!!float") || n.Decode(&v) != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		p.errorf(n, path, "want a number, got %q", n.Value)
		return 0
	}
	return v
}

// duration takes Go duration strings ("10s", "1m30s", "250ms"): a bare
// number is an error because its unit would be a guess.
func (p *parser) duration(n *yaml.Node, path string) time.Duration {
	s, ok := p.scalar(n, path)
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		p.errorf(n, path, "want a duration such as 10s, 1.5s or 250ms, got %q", s)
		return 0
	}
	return d
}

// names reads a list of pod names.
func (p *parser) names(n *yaml.Node, path string) []string {
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, path, "want a list of pod names, got %s", kindName(n))
		return nil
	}
	var out []string
	for i, c := range n.Content {
		sub := fmt.Sprintf("%s[%d]", path, i)
		p.lines[sub] = c.Line
		out = append(out, p.str(c, sub))
	}
	return out
}
