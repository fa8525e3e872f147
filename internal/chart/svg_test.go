package chart

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvp2p/kvp2p/internal/report"
	"github.com/kvp2p/kvp2p/internal/scenario"
	"github.com/kvp2p/kvp2p/internal/scenario/scenariotest"
)

const s = time.Second

// toyRuns fabricates plausible runs of pod-partial under the three
// policies (not a simulation: just enough shape to draw), so that the
// timeline can be tested and looked at without the simulator.
func toyRuns(sc *scenario.Scenario) []report.Run {
	ms := time.Millisecond
	var runs []report.Run
	for _, policy := range []string{"per-peer", "host-group", "domain"} {
		rng := rand.New(rand.NewPCG(uint64(sc.Seed), 0))
		var reqs []report.Request
		var ranks []string
		for _, p := range sc.Workload.Sources {
			pod, _ := sc.Pod(p)
			for r := range pod.Ranks {
				ranks = append(ranks, scenario.RankID(p, r))
			}
		}
		gap := time.Duration(float64(time.Second) / sc.Workload.Rate)
		for at := sc.Workload.Start; at < sc.Workload.Stop; at += gap {
			src := ranks[rng.IntN(len(ranks))]
			q := report.Request{ID: fmt.Sprintf("r%d", len(reqs)), Source: src, Consumer: "dst/0", Arrived: at,
				Resolved: at + time.Duration(5+rng.IntN(30))*ms, Outcome: report.Hit, Bytes: 4 << 20}
			inFault := at+40*ms >= 10*time.Second && at < 25*time.Second
			onHost := strings.HasPrefix(src, "src-")
			switch {
			case policy == "host-group" && onHost && at+40*ms >= 10*time.Second && at < 20*time.Second:
				q.Outcome, q.Bytes = report.Fallback, 0
				q.Resolved = max(at, 10*time.Second) + 2*ms
			case !inFault || !strings.HasPrefix(src, "src-a/"):
			case src == "src-a/0" || policy == "domain":
				q.Outcome, q.Bytes = report.Fallback, 0
				q.Resolved = max(at, 10*time.Second) + time.Duration(200+rng.IntN(60))*ms
			default:
				q.Outcome, q.Bytes = report.Fallback, 0
				q.Resolved = at + 30*time.Second
				if q.Resolved > sc.Duration {
					q.Outcome = report.Stuck
				}
			}
			reqs = append(reqs, q)
		}
		runs = append(runs, report.Run{Policy: policy, Requests: reqs, Report: report.Compute(sc, policy, reqs, 0)})
	}
	return runs
}

func TestSVG(t *testing.T) {
	sc, err := scenario.Load("pod-partial")
	if err != nil {
		t.Fatal(err)
	}
	runs := toyRuns(sc)
	var b bytes.Buffer
	if err := SVG(&b, sc, runs); err != nil {
		t.Fatal(err)
	}
	if path := os.Getenv("KVP2P_SVG_OUT"); path != "" { // to look at it: KVP2P_SVG_OUT=/tmp/t.svg
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	panels := map[string]bool{}
	classes := map[string]bool{}
	dec := xml.NewDecoder(bytes.NewReader(b.Bytes()))
	var root string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			for _, a := range se.Attr {
				switch a.Name.Local {
				case "data-policy":
					panels[a.Value] = true
				case "class":
					classes[a.Value] = true
				}
			}
		}
	}
	if root != "svg" {
		t.Errorf("root element %q, want svg", root)
	}
	for _, r := range runs {
		if !panels[r.Policy] {
			t.Errorf("no panel for %s", r.Policy)
		}
	}
	if len(panels) != len(runs) {
		t.Errorf("%d panels for %d runs", len(panels), len(runs))
	}
	for _, want := range []string{"hit", "fb", "false", "stuck"} {
		if !classes[want] {
			t.Errorf("no %q bars group", want)
		}
	}
	for _, want := range []string{"close-control src-a/0", "blackhole-data src-a/1-7", "per-peer", "TTF p50"} {
		if !bytes.Contains(b.Bytes(), []byte(want)) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	// The toy host-group run has false fallbacks: its title must say so.
	if runs[1].Report.FalseFallbacks == 0 {
		t.Fatal("toy host-group run has no false fallbacks")
	}
}

// Heights stay bounded however many requests wait at once.
func TestSVGBoundedHeight(t *testing.T) {
	sc := scenariotest.Fleet(scenariotest.Fault(10*s, scenario.Crash, "a/0"))
	var reqs []report.Request
	for i := range 5000 {
		reqs = append(reqs, report.Request{Source: "a/0", Arrived: time.Duration(i) * time.Millisecond, Outcome: report.Stuck})
	}
	var b bytes.Buffer
	if err := SVG(&b, sc, []report.Run{{Policy: "p", Requests: reqs, Report: report.Compute(sc, "p", reqs, 0)}}); err != nil {
		t.Fatal(err)
	}
	want := headerH + panelTitleH + axisH + panelGap + bandPadTop + maxLanes*laneStride + bandPadBot
	if !bytes.Contains(b.Bytes(), fmt.Appendf(nil, `height="%d"`, want)) {
		t.Errorf("height not capped at %d: %s", want, b.Bytes()[:200])
	}
}

func TestSVGEscapesAndRejects(t *testing.T) {
	sc := scenariotest.Fleet()
	var b bytes.Buffer
	if err := SVG(&b, sc, []report.Run{{Policy: `<a&"b">`}}); err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(b.Bytes(), new(struct{})); err != nil {
		t.Errorf("escaping failed: %v", err)
	}
	sc.Duration = 0
	if err := SVG(io.Discard, sc, nil); err == nil {
		t.Error("SVG of a zero-length run succeeded")
	}
}

// Every built-in draws, with its fault markers, as well-formed SVG.
func TestSVGBuiltins(t *testing.T) {
	all, err := scenario.LoadAll()
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range all {
		var b bytes.Buffer
		if err := SVG(&b, sc, toyRuns(sc)); err != nil {
			t.Fatalf("%s: %v", sc.Name, err)
		}
		if err := xml.Unmarshal(b.Bytes(), new(struct{})); err != nil {
			t.Errorf("%s: not well-formed: %v", sc.Name, err)
		}
		if dir := os.Getenv("KVP2P_SVG_DIR"); dir != "" {
			if err := os.WriteFile(dir+"/"+sc.Name+".svg", b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
