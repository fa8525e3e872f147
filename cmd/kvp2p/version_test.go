package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/kvp2p/kvp2p"
)

// TestVersionCommand: `kvp2p version` prints kvp2p.Version and the build.
func TestVersionCommand(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		want := "kvp2p " + kvp2p.Version + " (" + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
		if out.String() != want {
			t.Errorf("%v printed %q, want %q", args, out.String(), want)
		}
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"version", "extra"}, &out, &errb); code == 0 {
		t.Error("kvp2p version extra: exit 0")
	}
}

// TestVersionsAgree: Go and Python carry one version. kvp2p.Version is
// the source; python/kvp2p/__init__.py's __version__ must equal it, and so
// must pyproject.toml's version unless the package takes it dynamically.
func TestVersionsAgree(t *testing.T) {
	if !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(kvp2p.Version) {
		t.Errorf("kvp2p.Version %q is not MAJOR.MINOR.PATCH", kvp2p.Version)
	}
	initPy, err := os.ReadFile("../../python/kvp2p/__init__.py")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^__version__\s*=\s*["']([^"']+)["']\s*$`).FindSubmatch(initPy)
	if m == nil {
		t.Fatal("python/kvp2p/__init__.py sets no __version__")
	}
	if string(m[1]) != kvp2p.Version {
		t.Errorf("python/kvp2p/__init__.py: __version__ %q, Go's kvp2p.Version %q", m[1], kvp2p.Version)
	}
	pyproject, err := os.ReadFile("../../python/pyproject.toml")
	if err != nil {
		t.Fatal(err)
	}
	project := string(pyproject)
	if _, after, ok := strings.Cut(project, "[project]\n"); ok {
		project, _, _ = strings.Cut(after, "\n[")
	}
	if regexp.MustCompile(`(?m)^dynamic\s*=.*"version"`).MatchString(project) {
		return // the build takes __version__, checked above
	}
	v := regexp.MustCompile(`(?m)^version\s*=\s*"([^"]+)"`).FindStringSubmatch(project)
	if v == nil {
		t.Fatal("python/pyproject.toml: [project] has neither a version nor a dynamic one")
	}
	if v[1] != kvp2p.Version {
		t.Errorf("python/pyproject.toml: version %q, Go's kvp2p.Version %q", v[1], kvp2p.Version)
	}
}
