package scenario

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseTarget parses "pod/r", "pod/a-b" or "pod/*". It checks only the
// syntax: whether the pod exists and has those ranks is for validation,
// which knows the fleet. For "pod/*" First and Last are left zero until the
// fleet is known (Parse fills them in).
func ParseTarget(s string) (Target, error) {
	pod, ranks, ok := strings.Cut(s, "/")
	if !ok {
		return Target{}, fmt.Errorf("%q: want pod/rank, pod/first-last or pod/*", s)
	}
	if !validName(pod) {
		return Target{}, fmt.Errorf("%q: bad pod name %q", s, pod)
	}
	if ranks == "*" {
		return Target{Pod: pod, All: true}, nil
	}
	a, b, isRange := strings.Cut(ranks, "-")
	first, err := rankNumber(a)
	if err != nil {
		return Target{}, fmt.Errorf("%q: %v", s, err)
	}
	last := first
	if isRange {
		if last, err = rankNumber(b); err != nil {
			return Target{}, fmt.Errorf("%q: %v", s, err)
		}
		if first > last {
			return Target{}, fmt.Errorf("%q: empty rank range: %d > %d", s, first, last)
		}
	}
	return Target{Pod: pod, First: first, Last: last}, nil
}

// rankNumber accepts only plain decimal digits: "+1", " 1" or "0x1" in a
// target are typos, not ranks.
func rankNumber(s string) (int, error) {
	if s == "" || len(s) > 6 || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("bad rank %q: want a number such as 3", s)
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("bad rank %q", s)
	}
	return n, nil
}

// validName is the alphabet of scenario and pod names: they appear in
// targets ("pod/3"), rank ids and report columns, so no '/' or spaces.
func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
		if !ok {
			return false
		}
	}
	return true
}

// Pod returns the pod with that name.
func (sc *Scenario) Pod(name string) (Pod, bool) {
	for _, p := range sc.Pods {
		if p.Name == name {
			return p, true
		}
	}
	return Pod{}, false
}

// Ranks lists the rank ids ("pod/r") a target names, in rank order, clamped
// to the pod's ranks; nil if the pod is unknown.
func (sc *Scenario) Ranks(t Target) []string {
	p, ok := sc.Pod(t.Pod)
	if !ok {
		return nil
	}
	first, last := t.First, t.Last
	if t.All {
		first, last = 0, p.Ranks-1
	}
	first, last = max(first, 0), min(last, p.Ranks-1)
	var out []string
	for r := first; r <= last; r++ {
		out = append(out, RankID(p.Name, r))
	}
	return out
}

// SplitRankID splits "pod/r" into its pod and rank; ok is false if s is
// not of that form.
func SplitRankID(s string) (pod string, rank int, ok bool) {
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return "", 0, false
	}
	r, err := rankNumber(s[i+1:])
	if err != nil {
		return "", 0, false
	}
	return s[:i], r, true
}

func (f Fault) String() string {
	s := fmt.Sprintf("%v %s %s", f.At, f.Kind, f.Target)
	switch f.Kind {
	case Slow:
		s += " " + fmtRate(f.BytesPerSec)
	case Delay:
		s += " +" + f.Latency.String()
	}
	return s
}

// fmtRate prints bytes per second the way people think of link speeds.
func fmtRate(bps int64) string {
	switch {
	case bps >= 1<<20 && bps%(1<<20) == 0:
		return fmt.Sprintf("%d MiB/s", bps>>20)
	case bps >= 1<<10 && bps%(1<<10) == 0:
		return fmt.Sprintf("%d KiB/s", bps>>10)
	}
	return fmt.Sprintf("%d B/s", bps)
}
