package demo

import (
	"fmt"
	"io"
	"os"
	"time"
)

// progressLine shows a run's progress as one line. On a terminal it
// rewrites that line in place every update. Anywhere else (a pipe, a CI
// log), where a rewritten line would pile up as repeated lines, it prints
// a line only when the update's key changes (the built-in demo's phase), or
// with no key (a scenario's counts) at most every quietEvery.
type progressLine struct {
	w       io.Writer
	tty     bool
	open    bool // a terminal line is written without its newline
	printed bool // a line has been printed (lastKey, lastAt are set)
	lastKey string
	lastAt  time.Duration
}

// quietEvery spaces the lines of an unchanging key where the line cannot
// be rewritten: a scenario's counts, which change every second.
const quietEvery = 30 * time.Second

func newProgressLine(w io.Writer) *progressLine {
	return &progressLine{w: w, tty: isTerminal(w)}
}

// isTerminal reports whether w is a character device: a terminal, where
// "\r" rewrites the line.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// update shows text at el into the run.
func (p *progressLine) update(el time.Duration, key, text string) {
	line := fmt.Sprintf("  t=%-4v %s", el, text)
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		p.open = true
		return
	}
	if p.printed && key == p.lastKey && (key != "" || el-p.lastAt < quietEvery) {
		return
	}
	p.printed, p.lastKey, p.lastAt = true, key, el
	fmt.Fprintln(p.w, line)
}

// end finishes a terminal's line, so that what follows starts on its own.
func (p *progressLine) end() {
	if p.open {
		fmt.Fprintln(p.w)
		p.open = false
	}
}
