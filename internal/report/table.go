package report

import (
	"cmp"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// column is one column of the report table: its heading, how a report
// fills it, and the legend entry (legends) that explains it. Several
// columns share an entry (ttf p50, p99, max): the entry is printed once if
// any of them is.
type column struct {
	head   string
	name   bool // left-aligned (scenario, policy, labels); numbers are right-aligned
	narrow bool // in the narrow table (kvp2p demo without --wide)
	legend string
	value  func(Report) string
}

// legendEntry explains one column, or a group of columns (key).
type legendEntry struct{ key, text string }

// legends explain the columns, in table order, for people reading the
// table (kvp2p demo prints the entries of the columns it printed). The
// words are docs/design.md §7's.
func legends() []legendEntry {
	return []legendEntry{
		{"requests", "requests made; each names one source rank"},
		{"hits", "requests whose blocks were loaded from their source (and checked byte for byte)"},
		{"fallbacks", "requests the engine prefilled locally instead"},
		{"affected", "requests whose source rank, or consumer rank, had a fault while they were alive"},
		{"false", "false fallbacks: fallbacks although the request's source and consumer stayed healthy, other than deliberate ones"},
		{"deliberate", "deliberate fallbacks: the consumer chose to prefill because its load, from a live source, could not finish in time (too slow for its deadline, or queued past its start budget); not false"},
		{"stuck", "requests still unresolved at the end (there should be none)"},
		{"censored", "of the times below, how many are a stuck request's time so far (shown >= when a percentile falls on one)"},
		{"ttf", "time to fallback, ms, over affected requests: from the fault (or the arrival, if later) to the engine being told to prefill; - when none fell back"},
		{"tth", "time to hit, ms: arrival to a checked load, over the hits; - when there are none"},
		{"tth-healthy", "time to hit over the hits whose source had no fault while they were alive: what a policy's suspicion costs healthy requests (tth also counts affected requests that loaded after a heal instead of falling back)"},
		{"tth-domain", "time to hit over the hits whose source shared a failure domain with a faulted rank: what a policy costs a failed domain's healthy members"},
		{"corrupt", "loads whose bytes were wrong (there should be none)"},
		{"leaked", "slots still held after the final drain (there should be none)"},
		{"orphans", "the most slots held at once, while running, by nothing that could release them; - when not measured"},
		{"peak slots", "the most slots filling or pinned at once in the fleet; - when not measured"},
		{"loaded MiB", "bytes loaded by hits"},
		{"timers", "the timer set the policy ran with: vllm (vLLM's timers and transport, no watchdog) or kvp2p"},
		{"domains", "whether the pods' failure-domain labels were kept or dropped"},
	}
}

// reportColumns are the table's columns; labels adds the timers and
// domains columns (the ablation's).
func reportColumns(labels bool) []column {
	n := func(v int) string { return fmt.Sprint(v) }
	cols := []column{
		{head: "scenario", name: true, narrow: true, value: func(r Report) string { return r.Scenario }},
		{head: "policy", name: true, narrow: true, value: func(r Report) string { return r.Policy }},
	}
	if labels {
		cols = append(cols,
			column{head: "timers", name: true, legend: "timers", value: func(r Report) string { return cmp.Or(r.Timers, "preset") }},
			column{head: "domains", name: true, legend: "domains", value: domainsLabel})
	}
	return append(cols,
		column{head: "requests", legend: "requests", value: func(r Report) string { return n(r.Requests) }},
		column{head: "hits", narrow: true, legend: "hits", value: func(r Report) string { return n(r.Hits) }},
		column{head: "fallbacks", narrow: true, legend: "fallbacks", value: func(r Report) string { return n(r.Fallbacks) }},
		column{head: "affected", legend: "affected", value: func(r Report) string { return n(r.Affected) }},
		column{head: "false", narrow: true, legend: "false", value: func(r Report) string { return n(r.FalseFallbacks) }},
		column{head: "deliberate", legend: "deliberate", value: func(r Report) string { return n(r.DeliberateFallbacks) }},
		column{head: "stuck", narrow: true, legend: "stuck", value: func(r Report) string { return n(r.Stuck) }},
		column{head: "censored", legend: "censored", value: func(r Report) string { return n(r.Censored) }},
		column{head: "ttf p50 ms", narrow: true, legend: "ttf", value: func(r Report) string { return p50(r.TTFms) }},
		column{head: "p99 ms", narrow: true, legend: "ttf", value: func(r Report) string { return p99(r.TTFms) }},
		column{head: "max ms", legend: "ttf", value: func(r Report) string { return pmax(r.TTFms) }},
		column{head: "tth p50 ms", legend: "tth", value: func(r Report) string { return p50(r.TTHms) }},
		column{head: "p99 ms", legend: "tth", value: func(r Report) string { return p99(r.TTHms) }},
		column{head: "tth-healthy p99 ms", legend: "tth-healthy", value: func(r Report) string { return p99(r.TTHHealthyMs) }},
		column{head: "tth-domain p99 ms", legend: "tth-domain", value: func(r Report) string { return p99(r.TTHDomainMs) }},
		column{head: "corrupt", narrow: true, legend: "corrupt", value: func(r Report) string { return n(r.CorruptLoads) }},
		column{head: "leaked", narrow: true, legend: "leaked", value: func(r Report) string { return n(r.LeakedSlots) }},
		column{head: "orphans", legend: "orphans", value: func(r Report) string { return fmtSlots(r.OrphanSlots) }},
		column{head: "peak slots", legend: "peak slots", value: func(r Report) string { return fmtSlots(r.PeakSlots) }},
		column{head: "loaded MiB", legend: "loaded MiB", value: func(r Report) string {
			return fmt.Sprintf("%.1f", float64(r.BytesLoaded)/(1<<20))
		}},
	)
}

// Table writes reports as an aligned table for people, every column:
// names left, numbers right, times in milliseconds, bytes in MiB. A time
// that is only a lower bound (it fell on a request still unresolved at the
// end) is printed ">="; a time over an empty set is printed "-". The
// timers and domains columns appear when a report names its timers. Like
// fmt.Fprint it ignores write errors: it is meant for a terminal.
func Table(w io.Writer, reps []Report) { writeTable(w, reps, false) }

// NarrowTable is Table with the columns a reader needs first, under 100
// characters wide: outcomes (hits, fallbacks and stuck add up to the
// requests column it leaves out), time to fallback, corruption and leaks.
// Legend explains them.
func NarrowTable(w io.Writer, reps []Report) { writeTable(w, reps, true) }

// Legend writes one line per legend entry of the columns that Table
// (narrow: NarrowTable) prints for reps.
func Legend(w io.Writer, reps []Report, narrow bool) {
	printed := map[string]bool{}
	for _, c := range pick(reportColumns(hasLabels(reps)), narrow) {
		printed[c.legend] = true
	}
	var b strings.Builder
	b.WriteString("columns:\n")
	for _, l := range legends() {
		if printed[l.key] {
			fmt.Fprintf(&b, "  %-10s  %s\n", l.key, wrap(l.text, legendWidth-14, strings.Repeat(" ", 14)))
		}
	}
	_, _ = io.WriteString(w, b.String())
}

// legendWidth is the legend's line length: a terminal's, not the wide
// table's.
const legendWidth = 100

// wrap breaks text into lines of at most width characters at spaces,
// indenting every line after the first.
func wrap(text string, width int, indent string) string {
	var b strings.Builder
	n := 0
	for i, word := range strings.Fields(text) {
		switch {
		case i == 0:
		case n+1+len(word) > width:
			b.WriteString("\n" + indent)
			n = 0
		default:
			b.WriteByte(' ')
			n++
		}
		b.WriteString(word)
		n += len(word)
	}
	return b.String()
}

func writeTable(w io.Writer, reps []Report, narrow bool) {
	cols := pick(reportColumns(hasLabels(reps)), narrow)
	head := make([]string, len(cols))
	names := 0
	for i, c := range cols {
		head[i] = c.head
		if c.name {
			names++
		}
	}
	rows := [][]string{head}
	for _, r := range reps {
		row := make([]string, len(cols))
		for i, c := range cols {
			row[i] = c.value(r)
		}
		rows = append(rows, row)
	}
	writeAligned(w, rows, names)
}

// pick is cols, or only its narrow ones.
func pick(cols []column, narrow bool) []column {
	if !narrow {
		return cols
	}
	var out []column
	for _, c := range cols {
		if c.narrow {
			out = append(out, c)
		}
	}
	return out
}

// hasLabels: some report names its timers or dropped its domains, so the
// table shows the timers and domains columns.
func hasLabels(reps []Report) bool {
	for _, r := range reps {
		if r.Timers != "" || r.DomainsDropped {
			return true
		}
	}
	return false
}

func domainsLabel(r Report) string {
	if r.DomainsDropped {
		return "dropped"
	}
	return "kept"
}

// p50, p99 and pmax are a statistic's percentiles as the table prints
// them: "-" over no samples (a policy that never fell back has no time to
// fallback, not one of 0 ms), ">=" when only a lower bound.
func p50(t TTF) string  { return stat(t, t.P50, t.P50Censored) }
func p99(t TTF) string  { return stat(t, t.P99, t.P99Censored) }
func pmax(t TTF) string { return stat(t, t.Max, t.MaxCensored) }

func stat(t TTF, v float64, censored bool) string {
	if t.N == 0 {
		return "-"
	}
	return fmtAt(v, censored)
}

// writeAligned writes rows with the first names columns left-aligned and
// the rest right-aligned, two spaces apart. text/tabwriter aligns every
// column of a table the same way, so each block is aligned by a writer of
// its own and the two are joined line by line; the names block's last
// column loses the two spaces of padding that the numbers' right-aligned
// padding already puts in front of them.
func writeAligned(w io.Writer, rows [][]string, names int) {
	left := tabulate(rows, 0, names, 0)
	right := tabulate(rows, names, len(rows[0]), tabwriter.AlignRight)
	var b strings.Builder
	for i := range rows {
		if names > 0 && names < len(rows[i]) {
			left[i] = strings.TrimSuffix(left[i], "  ")
		}
		b.WriteString(strings.TrimRight(left[i]+right[i], " ") + "\n")
	}
	_, _ = io.WriteString(w, b.String())
}

// tabulate aligns columns [from, to) of rows with text/tabwriter, two
// spaces of padding, and returns one string per row.
func tabulate(rows [][]string, from, to int, flags uint) []string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', flags)
	for _, row := range rows {
		for _, c := range row[from:to] {
			_, _ = io.WriteString(tw, c+"\t")
		}
		_, _ = io.WriteString(tw, "\n")
	}
	_ = tw.Flush() // a strings.Builder never fails
	return strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
}

// fmtAt is a time, marked ">=" when it is only a lower bound.
func fmtAt(v float64, censored bool) string {
	if censored {
		return ">=" + FormatMs(v)
	}
	return FormatMs(v)
}

// fmtSlots prints a slot count; a driver that did not measure it says -1.
func fmtSlots(n int) string {
	if n < 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

// FormatMs prints milliseconds as the table does (one decimal below 100,
// none above); the timeline uses it too, so that the two agree.
func FormatMs(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// AblationTable writes the ablation matrix (kvp2p sim --ablation): one row
// per (scenario, policy, timers, domains), with the columns that tell what
// each part buys and costs: fallbacks, false ones, stuck, time to
// fallback and time to hit.
func AblationTable(w io.Writer, reps []Report) {
	rows := [][]string{{"scenario", "policy", "timers", "domains", "fallbacks", "false", "deliberate", "stuck",
		"ttf p50 ms", "p99 ms", "tth p50 ms", "p99 ms", "tth-domain p99 ms", "orphans"}}
	for _, r := range reps {
		rows = append(rows, []string{r.Scenario, r.Policy, cmp.Or(r.Timers, "preset"), domainsLabel(r),
			fmt.Sprint(r.Fallbacks), fmt.Sprint(r.FalseFallbacks), fmt.Sprint(r.DeliberateFallbacks), fmt.Sprint(r.Stuck),
			p50(r.TTFms), p99(r.TTFms), p50(r.TTHms), p99(r.TTHms), p99(r.TTHDomainMs), fmtSlots(r.OrphanSlots)})
	}
	writeAligned(w, rows, 4)
}
