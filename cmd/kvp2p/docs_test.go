package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// The user-facing documents: the README, the changelog and docs/*.md.
func docFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*.md: %v", err)
	}
	return append([]string{"../../README.md", "../../CHANGELOG.md"}, docs...)
}

// mdDoc is a Markdown file split into what the checks need: its prose
// (code removed), its code (fenced blocks and inline code spans) and its
// headings' anchors.
type mdDoc struct {
	prose   []string // lines outside fences, inline code blanked
	code    []string // each fenced line and each inline code span
	anchors map[string]bool
}

var (
	fenceRE    = regexp.MustCompile("^\\s*(```|~~~)")
	codeSpanRE = regexp.MustCompile("`[^`]+`")
	headingRE  = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	linkRE     = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
)

func parseMD(t *testing.T, path string) mdDoc {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := mdDoc{anchors: map[string]bool{}}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(string(b), "\n") {
		if fenceRE.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			d.code = append(d.code, line)
			continue
		}
		for _, span := range codeSpanRE.FindAllString(line, -1) {
			d.code = append(d.code, strings.Trim(span, "`"))
		}
		if m := headingRE.FindStringSubmatch(line); m != nil {
			// GitHub's anchors: a repeated heading gets -1, -2, ...
			slug := slugify(m[1])
			if n := seen[slug]; n > 0 {
				d.anchors[fmt.Sprintf("%s-%d", slug, n)] = true
			} else {
				d.anchors[slug] = true
			}
			seen[slug]++
		}
		d.prose = append(d.prose, codeSpanRE.ReplaceAllString(line, "``"))
	}
	return d
}

// slugify is GitHub's heading anchor: lower case, letters, digits, spaces,
// hyphens and underscores kept (spaces become hyphens), the rest dropped.
func slugify(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// TestDocLinks: every link in the documents is relative (a link to this
// repository's own files by URL would point at another version of them)
// and resolves: its file or directory exists, and an #anchor names a
// heading of the Markdown file it points to.
func TestDocLinks(t *testing.T) {
	parsed := map[string]mdDoc{}
	get := func(p string) mdDoc {
		d, ok := parsed[p]
		if !ok {
			d = parseMD(t, p)
			parsed[p] = d
		}
		return d
	}
	links := 0
	for _, doc := range docFiles(t) {
		for _, line := range get(doc).prose {
			for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
				target := m[1]
				links++
				name := filepath.Base(doc)
				switch {
				case strings.HasPrefix(target, "http://"), strings.HasPrefix(target, "https://"):
					if strings.Contains(target, "github.com/kvp2p/kvp2p") {
						t.Errorf("%s: %s: link to this repository by URL; use a relative link", name, target)
					}
					continue
				case strings.Contains(target, "://"), strings.HasPrefix(target, "/"), strings.HasPrefix(target, "mailto:"):
					t.Errorf("%s: %s: not a relative link", name, target)
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				path := doc
				if file != "" {
					path = filepath.Join(filepath.Dir(doc), filepath.FromSlash(file))
					if _, err := os.Stat(path); err != nil {
						t.Errorf("%s: link %s: %v", name, target, err)
						continue
					}
				}
				if anchor == "" {
					continue
				}
				if !strings.HasSuffix(path, ".md") {
					t.Errorf("%s: link %s: an anchor into a file that is not Markdown", name, target)
					continue
				}
				if !get(path).anchors[anchor] {
					t.Errorf("%s: link %s: %s has no heading with anchor #%s", name, target, filepath.Base(path), anchor)
				}
			}
		}
	}
	if links < 10 {
		t.Fatalf("found only %d links: the parser is broken", links)
	}
}

// commandRE finds a quoted kvp2p command, at the start of a code line or
// span: `kvp2p SUB ...`, `sudo kvp2p SUB ...` or `go run ./cmd/kvp2p SUB
// ...`, after environment assignments if any; not ./cmd/kvp2p as a package
// path (go test ./cmd/kvp2p), nor a table's cell that happens to read kvp2p.
var commandRE = regexp.MustCompile(`^\s*(?:\$\s+)?(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:sudo\s+)?(?:go run \./cmd/kvp2p|kvp2p)\s+([a-z][a-z-]*)(.*)`)

// TestDocCommands: every kvp2p command quoted in the documents (in code:
// fenced blocks and inline spans) names a real subcommand and only flags
// that subcommand has, as its -h lists them.
func TestDocCommands(t *testing.T) {
	flagsOf := map[string][]string{}
	// "sim find" is a command of its own, with flags of its own.
	for _, sub := range []string{"bench", "demo", "lab", "proxy", "serve", "sim", "sim find", "status", "version"} {
		var fl []string
		for _, line := range strings.Split(helpOf(t, append(strings.Fields(sub), "-h")...), "\n") {
			if f, ok := strings.CutPrefix(line, "  -"); ok {
				fl = append(fl, strings.Fields(f)[0])
			}
		}
		if sub != "version" && len(fl) == 0 {
			t.Fatalf("kvp2p %s -h lists no flags", sub)
		}
		flagsOf[sub] = fl
	}
	checked := 0
	for _, doc := range docFiles(t) {
		name := filepath.Base(doc)
		for _, code := range parseMD(t, doc).code {
			for _, m := range commandRE.FindAllStringSubmatch(code, -1) {
				sub, rest := m[1], m[2]
				if after, ok := strings.CutPrefix(rest, " find"); sub == "sim" && ok && (after == "" || after[0] == ' ') {
					sub, rest = "sim find", after
				}
				// The command ends at a comment, a pipe or another command.
				for _, stop := range []string{" #", " | ", "&&", ";", " >", "`"} {
					rest, _, _ = strings.Cut(rest, stop)
				}
				fl, ok := flagsOf[sub]
				if !ok {
					t.Errorf("%s: %q: kvp2p has no command %q", name, strings.TrimSpace(m[0]), sub)
					continue
				}
				checked++
				for _, tok := range strings.Fields(rest) {
					tok = strings.Trim(tok, "[]()'\"")
					if !strings.HasPrefix(tok, "-") || tok == "-" {
						continue
					}
					f := strings.TrimLeft(tok, "-")
					f, _, _ = strings.Cut(f, "=")
					if f != "h" && f != "help" && !slices.Contains(fl, f) {
						t.Errorf("%s: %q: kvp2p %s has no flag -%s", name, strings.TrimSpace(m[0]), sub, f)
					}
				}
			}
		}
	}
	if checked < 10 {
		t.Fatalf("checked only %d commands: the parser is broken", checked)
	}
}
