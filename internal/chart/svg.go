package chart

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/kvp2p/kvp2p/internal/report"
	"github.com/kvp2p/kvp2p/internal/scenario"
)

// Layout of the timeline, in SVG user units (pixels).
const (
	svgWidth    = 1200
	svgLeft     = 130 // room for band labels
	svgRight    = 24
	plotWidth   = svgWidth - svgLeft - svgRight
	headerH     = 64
	panelTitleH = 26
	axisH       = 26
	panelGap    = 18
	bandPadTop  = 16 // room for fault labels above the bars
	bandPadBot  = 4
	laneStride  = 4 // a 3 px bar and a 1 px gap
	barHeight   = 3
	maxLanes    = 48 // a band never grows past 16+48*4+4 px: bars then share lanes
	minBandH    = 34
)

// Colours by outcome: the eye should find red (false fallbacks) and
// orange (fallbacks the fault explains) first, grey (stuck) next.
var outcomeStyle = []struct {
	class, color, label string
}{
	{"hit", "#59a14f", "hit"},
	{"stuck", "#9a9a9a", "stuck (unresolved at the end)"},
	{"fb", "#f28e2b", "fallback (source had a fault)"},
	{"false", "#e03131", "false fallback (source healthy)"},
	{"deliberate", "#4e79a7", "deliberate fallback (source alive, too slow to wait for)"},
}

const (
	clsHit = iota
	clsStuck
	clsFallback
	clsFalse
	clsDeliberate
)

// SVG draws the runs of one scenario as a timeline, one panel per policy
// stacked vertically on the same time axis, so that a person sees at a
// glance which requests each policy failed, when, and whether the fault
// explains it. Rows are requests grouped into a band per source pod, drawn
// from arrival to resolution and coloured by outcome; faults are shaded
// over the bands of the pods they hit.
func SVG(w io.Writer, sc *scenario.Scenario, runs []report.Run) error {
	if sc.Duration <= 0 {
		return fmt.Errorf("scenario %q: no duration to draw", sc.Name)
	}
	t := &timeline{sc: sc, j: report.NewFaultIndex(sc)}
	t.layout(runs)
	var b bytes.Buffer
	height := headerH + len(runs)*(panelTitleH+axisH+panelGap)
	for _, band := range t.bands {
		height += len(runs) * band.height
	}
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="11">`+"\n",
		svgWidth, height, svgWidth, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#fff"/>`+"\n", svgWidth, height)
	t.header(&b)
	y := headerH
	for _, r := range runs {
		y = t.panel(&b, r, y)
	}
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

type timeline struct {
	sc    *scenario.Scenario
	j     report.FaultIndex
	bands []*band
}

// band is one source pod's rows. lanes is the same in every panel so that
// the panels line up and can be compared by eye.
type band struct {
	pod    string
	label  string
	lanes  int
	height int
}

// bar is one request placed in a lane.
type bar struct {
	x0, x1 float64
	lane   int
	class  int
	title  string
}

func (t *timeline) x(d time.Duration) float64 {
	f := float64(d) / float64(t.sc.Duration)
	return svgLeft + plotWidth*min(max(f, 0), 1)
}

func podOf(rank string) string {
	if pod, _, ok := scenario.SplitRankID(rank); ok {
		return pod
	}
	return rank
}

// layout decides the bands: every source pod in workload order, then any
// other pod that requests name or faults hit (a fault on a consumer still
// deserves a marker).
func (t *timeline) layout(runs []report.Run) {
	index := map[string]*band{}
	add := func(pod string) {
		if _, ok := index[pod]; ok {
			return
		}
		label := pod
		if p, ok := t.sc.Pod(pod); ok {
			label = p.Host
			if p.Domain != "" {
				label += " · " + p.Domain
			}
		}
		b := &band{pod: pod, label: label}
		index[pod] = b
		t.bands = append(t.bands, b)
	}
	for _, p := range t.sc.Workload.Sources {
		add(p)
	}
	for _, r := range runs {
		for _, q := range r.Requests {
			add(podOf(q.Source))
		}
	}
	for _, f := range t.sc.Faults {
		add(f.Target.Pod)
	}
	for _, r := range runs {
		for pod, bars := range t.pack(r.Requests) {
			lanes := 0
			for _, br := range bars {
				lanes = max(lanes, br.lane+1)
			}
			index[pod].lanes = max(index[pod].lanes, lanes)
		}
	}
	for _, b := range t.bands {
		b.height = max(minBandH, bandPadTop+b.lanes*laneStride+bandPadBot)
	}
}

// pack places each pod's requests, in arrival order, in the first lane
// where they do not overlap an earlier bar; past maxLanes a bar goes to
// the lane that frees up first and overlaps it, which keeps the height
// bounded when a fault leaves hundreds of requests waiting at once.
func (t *timeline) pack(reqs []report.Request) map[string][]bar {
	byPod := map[string][]report.Request{}
	for _, q := range reqs {
		byPod[podOf(q.Source)] = append(byPod[podOf(q.Source)], q)
	}
	out := map[string][]bar{}
	for pod, qs := range byPod {
		slices.SortStableFunc(qs, func(a, b report.Request) int { return cmp.Compare(a.Arrived, b.Arrived) })
		var laneEnd []float64
		for _, q := range qs {
			br := t.bar(q)
			lane := -1
			for i, e := range laneEnd {
				if e <= br.x0 {
					lane = i
					break
				}
			}
			if lane < 0 && len(laneEnd) < maxLanes {
				lane = len(laneEnd)
				laneEnd = append(laneEnd, 0)
			}
			if lane < 0 {
				lane = 0
				for i, e := range laneEnd {
					if e < laneEnd[lane] {
						lane = i
					}
				}
			}
			laneEnd[lane] = br.x1 + 1
			br.lane = lane
			out[pod] = append(out[pod], br)
		}
	}
	return out
}

func (t *timeline) bar(q report.Request) bar {
	end := t.j.LifeEnd(q)
	_, affected := t.j.Affected(q)
	br := bar{x0: t.x(q.Arrived), x1: t.x(end)}
	br.x1 = max(br.x1, br.x0+1.5) // a 2 ms hit is still visible
	switch {
	case q.Outcome == report.Hit:
		br.class = clsHit
	case q.Outcome == report.Stuck:
		br.class = clsStuck
		br.title = fmt.Sprintf("%s %s: arrived %v, unresolved at the end", q.ID, q.Source, q.Arrived)
	case q.Deliberate && !affected:
		br.class = clsDeliberate
		br.title = fmt.Sprintf("%s %s: arrived %v, prefilled at %v rather than wait for a slow source", q.ID, q.Source, q.Arrived, q.Resolved)
	case affected:
		br.class = clsFallback
		br.title = fmt.Sprintf("%s %s: arrived %v, fell back at %v", q.ID, q.Source, q.Arrived, q.Resolved)
	default:
		br.class = clsFalse
		br.title = fmt.Sprintf("%s %s: arrived %v, fell back at %v with its source healthy", q.ID, q.Source, q.Arrived, q.Resolved)
	}
	return br
}
