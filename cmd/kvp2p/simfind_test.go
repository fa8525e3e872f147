package main

import (
	"strings"
	"testing"
)

// TestSimFind: kvp2p sim find runs a small fleet, prints the comparison
// with the oracle, and refuses stray arguments.
func TestSimFind(t *testing.T) {
	out, code := simOut(t, "find", "--pods", "4", "--chunks", "512", "--requests", "400")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	for _, want := range []string{"fleet      4 pods x 8 ranks", "found / oracle", "summary traffic per rank", "memory per rank"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, code := simOut(t, "find", "extra"); code == 0 {
		t.Error("a stray argument was accepted")
	}
}
