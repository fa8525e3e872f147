package kvp2p

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoHeavyDeps: a program that embeds the library links neither gRPC,
// protobuf nor Prometheus. The engine sidecar (internal/sidecar) and the
// metrics endpoint (internal/metrics/prom, internal/status) bring those,
// and only the kvp2p command wires them.
func TestNoHeavyDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	banned := []string{"google.golang.org/grpc", "google.golang.org/protobuf", "github.com/prometheus/"}
	n := 0
	for _, pkg := range strings.Fields(string(out)) {
		n++
		for _, b := range banned {
			if strings.HasPrefix(pkg, b) {
				t.Errorf("the root package depends on %s", pkg)
			}
		}
	}
	if n < 10 {
		t.Fatalf("go list -deps listed %d packages: not a dependency list\n%s", n, out)
	}
}

// TestEmbedImportsOnlyTheLibrary: examples/embed is what a program that
// embeds kvp2p looks like, so it imports the kvp2p package and the
// standard library, nothing internal.
func TestEmbedImportsOnlyTheLibrary(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{join .Imports \"\\n\"}}", "./examples/embed").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	root := false
	for _, pkg := range strings.Fields(string(out)) {
		first, _, _ := strings.Cut(pkg, "/")
		switch {
		case pkg == "github.com/kvp2p/kvp2p":
			root = true
		case strings.Contains(first, "."):
			t.Errorf("examples/embed imports %s: only the kvp2p package and the standard library", pkg)
		}
	}
	if !root {
		t.Fatalf("examples/embed does not import the kvp2p package:\n%s", out)
	}
}
