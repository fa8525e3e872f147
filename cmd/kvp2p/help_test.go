package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// helpOf is what `kvp2p args...` prints for help, stdout and stderr
// together (the flag package prints usage on stderr), and its exit code.
func helpOf(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("kvp2p %s: exit %d: %s%s", strings.Join(args, " "), code, out.String(), errb.String())
	}
	return out.String() + errb.String()
}

// TestHelpTexts: every command's help is true and independent of the
// machine it is read on, in one style: a usage line, then "flags:" before
// the flags; the design it cites is the repository's docs/design.md.
func TestHelpTexts(t *testing.T) {
	top := helpOf(t, "--help")
	for _, cmd := range []string{"bench", "demo", "lab", "proxy", "serve", "sim", "status", "version"} {
		if !strings.Contains(top, "\n  "+cmd+" ") {
			t.Errorf("kvp2p --help does not list %s:\n%s", cmd, top)
		}
	}
	for _, cmd := range []string{"bench", "demo", "lab", "proxy", "serve", "sim", "status"} {
		h := helpOf(t, cmd, "-h")
		if !strings.HasPrefix(h, "usage: ") {
			t.Errorf("kvp2p %s -h does not start with its usage line:\n%s", cmd, h)
		}
		if strings.Count(h, "\nflags:\n") != 1 {
			t.Errorf("kvp2p %s -h: want one \"flags:\" heading before the flags:\n%s", cmd, h)
		}
		for _, bad := range []string{"this machine", "below", "issue "} {
			if strings.Contains(h, bad) {
				t.Errorf("kvp2p %s -h says %q:\n%s", cmd, bad, h)
			}
		}
		if strings.Contains(strings.ReplaceAll(h, "docs/design.md", ""), "docs/design.md") {
			t.Errorf("kvp2p %s -h cites a design.md outside docs/:\n%s", cmd, h)
		}
	}
	if h := helpOf(t, "serve", "-h"); !strings.Contains(h, "domain (default), per-peer or host-group") {
		t.Errorf("serve -h does not name every policy with the default:\n%s", h)
	}
	if h := helpOf(t, "demo", "-h"); !strings.Contains(h, "-wide") || !strings.Contains(h, "legend") {
		t.Errorf("demo -h does not describe --wide and the legend:\n%s", h)
	}
}
