package main

import (
	"strings"
	"testing"
)

func TestImportGroups(t *testing.T) {
	for _, tc := range []struct {
		name, imports string
		want          string // a substring of the one problem, or "" for none
	}{
		{"grouped", "\"fmt\"\n\t\"os\"\n\n\t\"example.com/x\"\n\t\"go.uber.org/y\"", ""},
		{"std only", "\"fmt\"", ""},
		{"commented group", "\"fmt\"\n\n\t// why\n\t\"example.com/x\"", ""},
		{"mixed", "\"fmt\"\n\t\"example.com/x\"", "mixes"},
		{"std after other", "\"example.com/x\"\n\n\t\"fmt\"", "follows"},
	} {
		src := "package p\n\nimport (\n\t" + tc.imports + "\n)\n"
		ps, err := checkFile(tc.name+".go", []byte(src))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		switch {
		case tc.want == "" && len(ps) != 0:
			t.Errorf("%s: problems %q, want none", tc.name, ps)
		case tc.want != "" && (len(ps) != 1 || !strings.Contains(ps[0], tc.want)):
			t.Errorf("%s: problems %q, want one saying %q", tc.name, ps, tc.want)
		}
	}
}

func TestTestOnlyImport(t *testing.T) {
	src := "package p\n\nimport \"github.com/kvp2p/kvp2p/internal/nodetest\"\n"
	if ps, _ := checkFile("p.go", []byte(src)); len(ps) != 1 {
		t.Errorf("production file importing nodetest: problems %q, want one", ps)
	}
	if ps, _ := checkFile("p_test.go", []byte(src)); len(ps) != 0 {
		t.Errorf("test file importing nodetest: problems %q, want none", ps)
	}
}
