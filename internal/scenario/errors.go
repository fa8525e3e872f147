package scenario

import (
	"fmt"
	"strings"
)

// Error is one problem in a scenario file. It names the file, the line and
// the field path (e.g. "faults[1].target") because scenario files are written
// by hand, and a person fixing one wants to jump straight to the spot:
//
//	pod-partial.yaml:12: faults[1].target: "src-a/9": rank 9 out of range (src-a has 8 ranks)
type Error struct {
	File  string
	Line  int    // 1-based; 0 when unknown (a Scenario built in code)
	Field string // path such as "pods[2].base_port"; empty for the whole file
	Msg   string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// ErrorList is every problem found in one file, in line order, so that one
// run of the tool reports them all rather than one per edit.
type ErrorList []*Error

// maxShown bounds the message of a long list: garbage input can produce
// many errors, and the first few locate the problem.
const maxShown = 10

func (l ErrorList) Error() string {
	var b strings.Builder
	for i, e := range l {
		if i == maxShown {
			fmt.Fprintf(&b, "\n(and %d more)", len(l)-maxShown)
			break
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap lets errors.As find the individual *Error values.
func (l ErrorList) Unwrap() []error {
	out := make([]error, len(l))
	for i, e := range l {
		out[i] = e
	}
	return out
}
