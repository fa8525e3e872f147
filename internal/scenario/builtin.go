package scenario

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kvp2p/kvp2p/scenarios"
)

// Builtins lists the names of the built-in scenarios (the files of the
// repository's scenarios/ directory), sorted.
func Builtins() []string {
	entries, err := fs.ReadDir(scenarios.FS, ".")
	if err != nil {
		return nil // an embed.FS root always reads; nothing sensible to add
	}
	var out []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".yaml"); ok && !e.IsDir() {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Load returns a built-in scenario by name ("pod-partial") or reads a
// scenario file by path. A bare word is taken as a built-in name first, so
// that `kvp2p sim pod-partial` never depends on the working directory; an
// argument with a path separator or a .yaml/.yml suffix is always a file.
func Load(nameOrPath string) (*Scenario, error) {
	looksLikePath := strings.ContainsAny(nameOrPath, `/\`) ||
		strings.HasSuffix(nameOrPath, ".yaml") || strings.HasSuffix(nameOrPath, ".yml")
	if !looksLikePath {
		if data, err := fs.ReadFile(scenarios.FS, nameOrPath+".yaml"); err == nil {
			return Parse(data, nameOrPath+".yaml")
		}
	}
	data, err := os.ReadFile(nameOrPath)
	if err != nil {
		if !looksLikePath && os.IsNotExist(err) {
			return nil, fmt.Errorf("scenario %q: neither a built-in (%s) nor a file", nameOrPath, strings.Join(Builtins(), ", "))
		}
		return nil, fmt.Errorf("scenario: %w", err)
	}
	return Parse(data, filepath.Clean(nameOrPath))
}

// LoadAll parses every built-in scenario, in name order.
func LoadAll() ([]*Scenario, error) {
	var out []*Scenario
	for _, name := range Builtins() {
		sc, err := Load(name)
		if err != nil {
			return nil, err
		}
		out = append(out, sc)
	}
	return out, nil
}

// Select is every built-in scenario for "all", else the one file or
// built-in name (Load): what the commands' --scenario takes.
func Select(name string) ([]*Scenario, error) {
	if name == "all" {
		return LoadAll()
	}
	sc, err := Load(name)
	if err != nil {
		return nil, err
	}
	return []*Scenario{sc}, nil
}
