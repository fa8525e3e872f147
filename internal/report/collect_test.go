package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestCollector: under JSON each run is one line as it is added; Table
// prints every run's row.
func TestCollector(t *testing.T) {
	var b bytes.Buffer
	c := NewCollector(&b, true)
	for _, p := range []string{"per-peer", "domain"} {
		if err := c.Add(Run{Policy: p, Report: Report{Scenario: "s", Policy: p, Requests: 3}}); err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want two JSON lines, got %q", b.String())
	}
	var r Report
	if err := json.Unmarshal([]byte(lines[1]), &r); err != nil || r.Policy != "domain" || r.Requests != 3 {
		t.Errorf("second line %q: %+v %v", lines[1], r, err)
	}
	if len(c.Runs()) != 2 || c.Reports()[0].Policy != "per-peer" {
		t.Errorf("runs %+v", c.Runs())
	}
	b.Reset()
	c = NewCollector(&b, false)
	_ = c.Add(Run{Policy: "p", Report: Report{Scenario: "s", Policy: "p"}})
	if b.Len() != 0 {
		t.Errorf("printed before Table: %q", b.String())
	}
	c.Table()
	if lines := strings.Split(strings.TrimSpace(b.String()), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[1], "s ") {
		t.Errorf("table %q", b.String())
	}
}
