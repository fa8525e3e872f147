package demo

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestProgressLineOnePerPhase: where a line cannot be rewritten, the
// built-in demo's progress is one line per phase, not one per tick (the
// settling phase alone used to print 16 identical lines).
func TestProgressLineOnePerPhase(t *testing.T) {
	o := Options{Run: 14 * time.Second, Settle: 32 * time.Second, CrashAt: 3 * time.Second, PartAt: 6 * time.Second}
	var b bytes.Buffer
	line := newProgressLine(&b)
	for el := time.Second; el <= o.Run+o.Settle; el += time.Second {
		p := phaseAt(el, o)
		line.update(el, p, p)
	}
	line.end()
	got := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	want := []string{
		"  t=1s   workload",
		"  t=4s   workload; src-b/0 crashed",
		"  t=7s   workload; src-b/0 crashed, src-a partly failed",
		"  t=15s  settling: waiting for every request to resolve",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("progress:\n%s\nwant:\n%s", b.String(), strings.Join(want, "\n"))
	}
}

// TestProgressLineQuietCounts: a scenario's counts change every tick; off
// a terminal they are printed at most every quietEvery.
func TestProgressLineQuietCounts(t *testing.T) {
	var b bytes.Buffer
	line := newProgressLine(&b)
	for el := time.Second; el <= 95*time.Second; el += time.Second {
		line.update(el, "", "domain "+el.String()+" resolved")
	}
	got := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(got) != 4 || !strings.Contains(got[0], "t=1s") || !strings.Contains(got[3], "t=1m31s") {
		t.Errorf("want lines at 1s, 31s, 61s, 91s:\n%s", b.String())
	}
}

// TestProgressLineTerminal: on a terminal every update rewrites one line,
// and end finishes it.
func TestProgressLineTerminal(t *testing.T) {
	var b bytes.Buffer
	line := &progressLine{w: &b, tty: true}
	line.update(time.Second, "x", "workload")
	line.update(2*time.Second, "x", "workload")
	line.end()
	if got, want := b.String(), "\r\033[K  t=1s   workload\r\033[K  t=2s   workload\n"; got != want {
		t.Errorf("terminal progress %q, want %q", got, want)
	}
	if strings.Count(b.String(), "\n") != 1 {
		t.Errorf("more than one line on a terminal: %q", b.String())
	}
}
