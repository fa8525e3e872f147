package scenario

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// Windows derives, from the fault timeline, the intervals during which
// each rank had a fault that makes its requests "affected" (design.md §7;
// FaultKind.CountsAsFault). Instant kinds give From == To; a lasting one
// stays open until a heal of that rank (To = heal time) or forever
// (To = -1). A heal ends every open window of every rank it targets.
// The result is ordered by From, then by rank within one fault's target.
//
// The windows are the ground truth a policy is judged against: they come
// from the scenario, never from what the policy under test believed.
func Windows(sc *Scenario) []Window {
	faults := slices.Clone(sc.Faults) // Parse sorts them; a Scenario built in code may not
	slices.SortStableFunc(faults, func(a, b Fault) int { return cmp.Compare(a.At, b.At) })
	var out []Window
	open := map[string][]int{} // rank -> indices into out still open
	for _, f := range faults {
		for _, r := range sc.Ranks(f.Target) {
			switch {
			case f.Kind == Heal:
				for _, i := range open[r] {
					out[i].To = f.At
				}
				delete(open, r)
			case !f.Kind.CountsAsFault():
			case f.Kind.Instant():
				out = append(out, Window{Rank: r, Kind: f.Kind, From: f.At, To: f.At})
			default:
				open[r] = append(open[r], len(out))
				out = append(out, Window{Rank: r, Kind: f.Kind, From: f.At, To: -1})
			}
		}
	}
	return out
}

// judge classifies requests against the windows; shared by Compute and SVG
// so that the picture and the numbers can never disagree.
type judge struct {
	byRank map[string][]Window // each ordered by From
	end    time.Duration       // a stuck request lives until here
}

func newJudge(sc *Scenario) judge {
	j := judge{byRank: map[string][]Window{}, end: sc.Duration}
	for _, w := range Windows(sc) {
		j.byRank[w.Rank] = append(j.byRank[w.Rank], w)
	}
	for _, ws := range j.byRank {
		slices.SortStableFunc(ws, func(a, b Window) int { return cmp.Compare(a.From, b.From) })
	}
	return j
}

// lifeEnd is when a request stopped depending on its source.
func (j judge) lifeEnd(r Request) time.Duration {
	if r.Outcome == Stuck {
		return max(j.end, r.Arrived)
	}
	return r.Resolved
}

// affected reports whether any window of r's source overlaps r's life
// [Arrived, end], bounds included: a fault at the very instant a request
// arrives, or an instant fault at the moment it resolves, counts. It also
// returns the earliest such window, from which time to fallback is taken.
func (j judge) affected(r Request) (Window, bool) {
	end := j.lifeEnd(r)
	for _, w := range j.byRank[r.Source] {
		if w.From > end {
			break
		}
		if w.To < 0 || w.To >= r.Arrived {
			return w, true
		}
	}
	return Window{}, false
}

// Compute reduces one run's request records to design.md §7's report.
// leakedSlots is measured by the runner (slots still reserved after the
// run has drained) and is passed through.
func Compute(sc *Scenario, policy string, reqs []Request, leakedSlots int) Report {
	rep := Report{Scenario: sc.Name, Policy: policy, Requests: len(reqs), LeakedSlots: leakedSlots}
	j := newJudge(sc)
	var ttf []float64
	for _, r := range reqs {
		w, hit := j.affected(r)
		if hit {
			rep.Affected++
		}
		switch r.Outcome {
		case Hit:
			rep.Hits++
			rep.BytesLoaded += r.Bytes
		case Fallback:
			rep.Fallbacks++
			if !hit {
				rep.FalseFallbacks++
				break
			}
			// From the fault, or from the request's arrival if it came
			// later: the time the engine was kept waiting by the fault.
			d := r.Resolved - max(w.From, r.Arrived)
			ttf = append(ttf, ms(max(d, 0)))
		case Stuck:
			rep.Stuck++
		}
		if r.Corrupt {
			rep.CorruptLoads++
		}
	}
	slices.Sort(ttf)
	rep.TTFms = TTF{P50: nearestRank(ttf, 50), P99: nearestRank(ttf, 99), Max: nearestRank(ttf, 100)}
	return rep
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// nearestRank is the p-th percentile of sorted values by the nearest-rank
// method (always one of the values, never an interpolation); zero when
// there are none.
func nearestRank(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	k := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(k, 1), len(sorted))-1]
}

// JSON is the report as one line of JSON with design.md §7's field names,
// for `--json` output (one object per line per scenario and policy).
func (r Report) JSON() ([]byte, error) { return json.Marshal(r) }

// Table writes reports as an aligned table for people: names left,
// numbers right, times in milliseconds, bytes in MiB. Like fmt.Fprint it
// ignores write errors: it is meant for a terminal.
func Table(w io.Writer, reps []Report) {
	rows := [][]string{{"scenario", "policy", "requests", "hits", "fallbacks", "affected", "false", "stuck",
		"ttf p50 ms", "p99 ms", "max ms", "corrupt", "leaked", "loaded MiB"}}
	for _, r := range reps {
		rows = append(rows, []string{r.Scenario, r.Policy,
			fmt.Sprint(r.Requests), fmt.Sprint(r.Hits), fmt.Sprint(r.Fallbacks), fmt.Sprint(r.Affected),
			fmt.Sprint(r.FalseFallbacks), fmt.Sprint(r.Stuck),
			fmtMs(r.TTFms.P50), fmtMs(r.TTFms.P99), fmtMs(r.TTFms.Max),
			fmt.Sprint(r.CorruptLoads), fmt.Sprint(r.LeakedSlots),
			fmt.Sprintf("%.1f", float64(r.BytesLoaded)/(1<<20))})
	}
	width := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, c := range row {
			width[i] = max(width[i], len(c))
		}
	}
	var b strings.Builder
	for _, row := range rows {
		for i, c := range row {
			pad := strings.Repeat(" ", width[i]-len(c))
			switch {
			case i < 2: // names, left-aligned
				b.WriteString(c)
				if i < len(row)-1 {
					b.WriteString(pad)
				}
			default:
				b.WriteString(pad + c)
			}
			if i < len(row)-1 {
				b.WriteString("  ")
			}
		}
		b.WriteByte('\n')
	}
	_, _ = io.WriteString(w, b.String())
}

func fmtMs(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}
