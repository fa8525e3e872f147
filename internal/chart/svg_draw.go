package chart

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kvp2p/kvp2p/internal/report"
	"github.com/kvp2p/kvp2p/internal/scenario"
)

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder never fails
	return b.String()
}

// header: the scenario's name and fault timeline in words, and the legend.
func (t *timeline) header(b *bytes.Buffer) {
	// The whole timeline in words, cut short where it would run off the
	// page (a flapping scenario has dozens of entries; the bands show them).
	var faults []string
	room := 150 - len(t.sc.Name)
	for i, f := range t.sc.Faults {
		s := f.String()
		if room -= len(s) + 2; room < 0 {
			faults = append(faults, fmt.Sprintf("… %d more", len(t.sc.Faults)-i))
			break
		}
		faults = append(faults, s)
	}
	fmt.Fprintf(b, `<text x="12" y="20" font-size="15" font-weight="bold">%s</text>`+"\n", esc(t.sc.Name))
	fmt.Fprintf(b, `<text x="%d" y="20" fill="#555">%v run · faults: %s</text>`+"\n",
		12+9*len(t.sc.Name)+12, t.sc.Duration, esc(strings.Join(faults, "; ")))
	x := 12
	legend := func(swatch, label string) {
		fmt.Fprintf(b, `<g transform="translate(%d,40)">%s<text x="20" y="9">%s</text></g>`+"\n", x, swatch, esc(label))
		x += 32 + 6*len(label)
	}
	for _, o := range outcomeStyle {
		legend(fmt.Sprintf(`<rect y="3" width="16" height="5" fill="%s"/>`, o.color), o.label)
	}
	legend(`<rect width="16" height="11" fill="#e03131" fill-opacity="0.13"/>`, "fault on the source")
	legend(`<rect width="16" height="11" fill="#4c78a8" fill-opacity="0.15"/>`, "slow / delay (not a fault)")
	legend(`<line x1="8" x2="8" y1="0" y2="11" stroke="#a61e4d" stroke-dasharray="2,2"/>`, "instant fault")
}

// panel draws one policy's run starting at y and returns the y after it.
func (t *timeline) panel(b *bytes.Buffer, r report.Run, y int) int {
	rep := r.Report
	fmt.Fprintf(b, `<g class="panel" data-policy="%s">`+"\n", esc(r.Policy))
	fmt.Fprintf(b, `<text x="12" y="%d" fill="#333"><tspan font-weight="bold" font-size="13" fill="#000">%s</tspan>`+
		` &#160; %d requests (%d affected) · %d fallbacks, <tspan fill="#e03131" font-weight="bold">%d false</tspan>`+
		` · %d stuck · TTF p50 %s / p99 %s / max %s ms</text>`+"\n",
		y+17, esc(r.Policy), rep.Requests, rep.Affected, rep.Fallbacks, rep.FalseFallbacks, rep.Stuck,
		report.FormatMs(rep.TTFms.P50), report.FormatMs(rep.TTFms.P99), report.FormatMs(rep.TTFms.Max))
	y += panelTitleH
	top := y
	bars := t.pack(r.Requests)
	for i, bd := range t.bands {
		fill := "#fafafa"
		if i%2 == 1 {
			fill = "#f1f3f5"
		}
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`+"\n", svgLeft, y, plotWidth, bd.height, fill)
		fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end" font-weight="bold">%s</text>`+"\n", svgLeft-8, y+14, esc(bd.pod))
		fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end" font-size="9" fill="#777">%s</text>`+"\n", svgLeft-8, y+26, esc(bd.label))
		t.faults(b, bd, y)
		t.bars(b, bars[bd.pod], y+bandPadTop)
		y += bd.height
	}
	t.axis(b, top, y)
	b.WriteString("</g>\n")
	return y + axisH + panelGap
}

// bars draws one band's bars, hits first so that fallbacks, false
// fallbacks and stuck requests stay visible where lanes are shared.
func (t *timeline) bars(b *bytes.Buffer, bars []bar, y0 int) {
	for class, o := range outcomeStyle {
		fmt.Fprintf(b, `<g class="%s" fill="%s">`, o.class, o.color)
		for _, br := range bars {
			if br.class != class {
				continue
			}
			y := y0 + br.lane*laneStride
			if br.title == "" {
				fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d"/>`, br.x0, y, br.x1-br.x0, barHeight)
			} else {
				fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d"><title>%s</title></rect>`,
					br.x0, y, br.x1-br.x0, barHeight, esc(br.title))
			}
		}
		b.WriteString("</g>\n")
	}
}

// faults shades, over a pod's band, each fault aimed at it: a span until
// the heal for lasting faults, a dashed line for instant ones. Faults at
// the same instant share one label ("close-control src-a/0 · blackhole-data
// src-a/1-7"); a label that would overprint the previous one is left out
// (a flapping rank gets one label, not ten; every span has a tooltip).
func (t *timeline) faults(b *bytes.Buffer, bd *band, y int) {
	type label struct {
		at    time.Duration
		text  string
		color string
	}
	var labels []label
	for i, f := range t.sc.Faults {
		if f.Target.Pod != bd.pod || f.Kind == scenario.Heal {
			continue
		}
		x0 := t.x(f.At)
		color := "#a61e4d"
		if f.Kind.Instant() {
			if !f.Kind.CountsAsFault() {
				color = "#4c78a8"
			}
			fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="%s" stroke-width="1.5" stroke-dasharray="3,2"><title>%s</title></line>`+"\n",
				x0, x0, y, y+bd.height, color, esc(f.String()))
		} else {
			fill, opacity := "#e03131", 0.13
			if !f.Kind.CountsAsFault() {
				fill, opacity, color = "#4c78a8", 0.15, "#4c78a8"
			}
			x1 := t.x(t.healOf(i))
			fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" fill-opacity="%.2f"><title>%s</title></rect>`+"\n",
				x0, y, max(x1-x0, 1), bd.height, fill, opacity, esc(f.String()))
		}
		text := string(f.Kind) + " " + f.Target.String()
		if n := len(labels); n > 0 && labels[n-1].at == f.At {
			labels[n-1].text += " · " + text
		} else {
			labels = append(labels, label{f.At, text, color})
		}
	}
	labelEnd := 0.0
	for _, l := range labels {
		x := t.x(l.at) + 3
		if x < labelEnd {
			continue
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%d" font-size="10" fill="%s">%s</text>`+"\n", x, y+11, l.color, esc(l.text))
		labelEnd = x + 5.6*float64(len(l.text)) + 6
	}
}

// healOf is when fault i stops being drawn: the first later heal whose
// target shares a rank with it, or the end of the run.
func (t *timeline) healOf(i int) time.Duration {
	f := t.sc.Faults[i]
	mine := t.sc.Ranks(f.Target)
	for _, h := range t.sc.Faults[i+1:] {
		if h.Kind != scenario.Heal || h.At < f.At {
			continue
		}
		for _, r := range t.sc.Ranks(h.Target) {
			if slices.Contains(mine, r) {
				return h.At
			}
		}
	}
	return t.sc.Duration
}

// axis draws a tick every second, and a labelled grid line every few
// seconds (as many as fit, at least 50 px apart).
func (t *timeline) axis(b *bytes.Buffer, top, bottom int) {
	secs := int(t.sc.Duration / time.Second)
	step := 1
	for _, s := range []int{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600} {
		step = s
		if float64(s)*plotWidth/t.sc.Duration.Seconds() >= 50 {
			break
		}
	}
	fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#333"/>`+"\n", svgLeft, svgLeft+plotWidth, bottom, bottom)
	tickEvery := 1
	if secs > plotWidth/4 { // more than one tick per 4 px is a grey smear
		tickEvery = step
	}
	for s := 0; s <= secs; s += tickEvery {
		x := t.x(time.Duration(s) * time.Second)
		if s%step == 0 {
			fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#000" stroke-opacity="0.08"/>`+"\n", x, x, top, bottom)
			fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#333"/>`+"\n", x, x, bottom, bottom+6)
			fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" font-size="10" fill="#333">%ds</text>`+"\n", x, bottom+17, s)
		} else {
			fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#333"/>`+"\n", x, x, bottom, bottom+3)
		}
	}
}
