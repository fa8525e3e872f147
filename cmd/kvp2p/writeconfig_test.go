package main

import (
	"os"
	"path/filepath"
	"testing"
)

// writeConfig writes a YAML config into the test's temp dir (a copy of
// internal/config's test helper, which the serve tests share).
func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kvp2p.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
