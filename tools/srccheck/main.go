// Command srccheck checks what gofmt and go vet do not: that every import
// block groups the standard library apart from other modules (standard
// library first, then a blank line, then the rest), and that the shared
// test-helper packages are imported by tests only. With -helpers it lists
// the helper functions that the tests of two or more packages each
// define (a list to read, not a verdict: two helpers may share a name and
// nothing else).
//
//	go run ./tools/srccheck [-helpers] [dir]
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// testOnly are the packages that only tests may import.
var testOnly = []string{
	"github.com/kvp2p/kvp2p/internal/nodetest",
	"github.com/kvp2p/kvp2p/internal/nodetest/testkeys",
	"github.com/kvp2p/kvp2p/internal/scenario/scenariotest",
}

func main() {
	helpers := flag.Bool("helpers", false, "list the test helpers defined in the tests of more than one package")
	flag.Parse()
	root := "."
	if flag.NArg() > 0 {
		root = flag.Arg(0)
	}
	files, err := goFiles(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "srccheck:", err)
		os.Exit(2)
	}
	if *helpers {
		for _, l := range sharedHelpers(root, files) {
			fmt.Println(l)
		}
		return
	}
	var problems []string
	for _, p := range files {
		src, err := os.ReadFile(p)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		ps, err := checkFile(p, src)
		if err != nil {
			problems = append(problems, err.Error())
		}
		problems = append(problems, ps...)
	}
	for _, p := range problems {
		fmt.Println(p)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
}

// goFiles lists the .go files below root, skipping hidden directories,
// testdata and the Python tree.
func goFiles(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			n := d.Name()
			if p != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "python" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") {
			out = append(out, p)
		}
		return nil
	})
	return out, err
}

// checkFile returns the problems of one file's imports.
func checkFile(name string, src []byte) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.ImportsOnly|parser.ParseComments)
	if err != nil {
		return nil, err
	}
	if ast.IsGenerated(f) {
		return nil, nil // protoc's output is regenerated, not edited
	}
	var problems []string
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.IMPORT {
			continue
		}
		problems = append(problems, checkGroups(fset, name, gd)...)
	}
	if !strings.HasSuffix(name, "_test.go") && !inTestOnly(name) {
		for _, im := range f.Imports {
			path, _ := strconv.Unquote(im.Path.Value)
			for _, t := range testOnly {
				if path == t {
					problems = append(problems, fmt.Sprintf("%s: imports %s, which only tests may import", fset.Position(im.Pos()), path))
				}
			}
		}
	}
	return problems, nil
}

// inTestOnly says whether the file is in a test-only package, which may
// import the others (nodetest builds on testkeys).
func inTestOnly(name string) bool {
	dir := filepath.ToSlash(filepath.Dir(name))
	for _, t := range testOnly {
		if rel := strings.TrimPrefix(t, "github.com/kvp2p/kvp2p/"); dir == rel || strings.HasSuffix(dir, "/"+rel) {
			return true
		}
	}
	return false
}

// checkGroups checks one import declaration: its groups (runs of specs
// with no blank line between) each hold standard-library packages only or
// other modules' only, and no standard-library group follows another.
func checkGroups(fset *token.FileSet, name string, gd *ast.GenDecl) []string {
	var problems []string
	sawOther := false
	groupStart, prevEnd := 0, -1
	var kinds []bool // std or not, of the current group's specs
	flush := func(line int) {
		if len(kinds) == 0 {
			return
		}
		std, other := 0, 0
		for _, k := range kinds {
			if k {
				std++
			} else {
				other++
			}
		}
		switch {
		case std > 0 && other > 0:
			problems = append(problems, fmt.Sprintf("%s:%d: an import group mixes the standard library with other modules", name, groupStart))
		case std > 0 && sawOther:
			problems = append(problems, fmt.Sprintf("%s:%d: a standard-library import group follows other modules'", name, groupStart))
		}
		if other > 0 {
			sawOther = true
		}
		kinds = kinds[:0]
	}
	for _, s := range gd.Specs {
		is := s.(*ast.ImportSpec)
		start := is.Pos()
		if is.Doc != nil {
			start = is.Doc.Pos()
		}
		line := fset.Position(start).Line
		if prevEnd >= 0 && line-prevEnd > 1 {
			flush(line)
		}
		if len(kinds) == 0 {
			groupStart = line
		}
		path, _ := strconv.Unquote(is.Path.Value)
		kinds = append(kinds, isStd(path))
		prevEnd = fset.Position(is.End()).Line
	}
	flush(0)
	return problems
}

// isStd reports whether path is a standard-library package: its first
// element has no dot (module paths start with a domain).
func isStd(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// sharedHelpers lists the top-level functions (Test, Benchmark, Fuzz and
// Example functions aside) that the _test.go files of two or more
// directories define, one line a name, and a count.
func sharedHelpers(root string, files []string) []string {
	defs := map[string]map[string]bool{}
	for _, p := range files {
		if !strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.SkipObjectResolution)
		if err != nil {
			continue
		}
		dir, _ := filepath.Rel(root, filepath.Dir(p))
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || entryPoint(fd.Name.Name) {
				continue
			}
			if defs[fd.Name.Name] == nil {
				defs[fd.Name.Name] = map[string]bool{}
			}
			defs[fd.Name.Name][dir] = true
		}
	}
	var out []string
	for n, ds := range defs {
		if len(ds) < 2 {
			continue
		}
		var dirs []string
		for d := range ds {
			dirs = append(dirs, d)
		}
		sort.Strings(dirs)
		out = append(out, n+": "+strings.Join(dirs, " "))
	}
	sort.Strings(out)
	return append(out, fmt.Sprintf("%d helper names defined in the tests of more than one package", len(out)))
}

func entryPoint(name string) bool {
	if name == "TestMain" || name == "init" {
		return true
	}
	for _, p := range []string{"Test", "Benchmark", "Fuzz", "Example"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
